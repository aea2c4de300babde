package sandbox

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// TestPortForwarderDial carries forwards through a Dial function (a
// tunnel's dialer, as ustack wg's -L): TCP both ways and UDP to echo
// servers on the loopback, forwards added and removed at run time, and
// Close resets a connection it relays.
func TestPortForwarderDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go xfer.EchoStreams(ln)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	go xfer.EchoPackets(pc)

	dialed := make(chan string, 16)
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		dialed <- network + " " + address
		// The dialer resolves names, as a tunnel's does through its DNS.
		return (&net.Dialer{}).DialContext(ctx, network, strings.Replace(address, "localhost:", "127.0.0.1:", 1))
	}
	p, err := NewPortForwarder(&PortForwarderOptions{Dial: dial, UDPIdleTimeout: time.Minute})
	require.NoError(t, err)
	defer p.Close()

	any0 := netip.MustParseAddrPort("127.0.0.1:0")
	tcpAt, err := p.Listen(HostForward{Host: any0, To: ln.Addr().String()})
	require.NoError(t, err)
	udp, err := p.Add(HostForward{UDP: true, Host: any0, To: "localhost:" + strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)})
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{tcpAt}, p.Addrs())
	require.Equal(t, []HostForwardInfo{udp}, p.List())

	c, err := net.Dial("tcp", tcpAt.String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, xfer.RoundTrip(c, c, []byte("through the dialer")))
	require.Equal(t, "tcp "+ln.Addr().String(), <-dialed)

	u, err := net.Dial("udp", udp.Addr.String())
	require.NoError(t, err)
	defer u.Close()
	require.NoError(t, u.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = u.Write([]byte("a datagram"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := u.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "a datagram", string(buf[:n]))
	require.Contains(t, <-dialed, "udp localhost:", "the name goes to the dialer to resolve")
	conns, failed := p.Counts()
	require.Equal(t, [2]uint64{2, 0}, [2]uint64{conns, failed})

	require.NoError(t, p.Remove(udp.ID))
	require.Error(t, p.Remove(udp.ID))
	require.Empty(t, p.List())

	// Close resets the relayed connection.
	require.NoError(t, p.Close())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(buf)
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "Close ended the connection: %v", err)
	_, err = p.Listen(HostForward{Host: any0, To: ln.Addr().String()})
	require.ErrorIs(t, err, errClosed)
}

// TestPortForwarderFailed counts a connection whose far side refuses it,
// and refuses options without exactly one way to dial.
func TestPortForwarderFailed(t *testing.T) {
	refused := func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errClosed}
	}
	p, err := NewPortForwarder(&PortForwarderOptions{Dial: refused})
	require.NoError(t, err)
	defer p.Close()
	at, err := p.Listen(HostForward{Host: netip.MustParseAddrPort("127.0.0.1:0"), To: "198.18.0.2:80"})
	require.NoError(t, err)
	// The reset may come before the connect returns.
	c, err := net.Dial("tcp", at.String())
	if err == nil {
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = c.Read(make([]byte, 1))
	}
	require.ErrorContains(t, err, "reset")
	conns, failed := p.Counts()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{conns, failed})

	for _, o := range []*PortForwarderOptions{nil, {}} {
		_, err := NewPortForwarder(o)
		require.ErrorContains(t, err, "give one of them")
	}
	_, err = p.Listen(HostForward{Host: netip.MustParseAddrPort("127.0.0.1:0")})
	require.ErrorContains(t, err, "needs a host address and a destination")
}
