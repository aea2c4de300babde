//go:build linux

package integration

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/wgnet"
)

// udpTally counts the UDP datagrams from one port that a namespace's lo
// carries, as a packet socket bound to IPv4 sees them (lo's receive
// side: each frame once): a UDP GSO packet the device took whole shows
// as one large frame, one the kernel segmented first as single
// datagrams.
type udpTally struct {
	fd                         int
	stop                       atomic.Bool
	wg                         sync.WaitGroup
	closeOnce                  sync.Once
	single, singleB, gso, gsoB atomic.Int64
}

// newUDPTally opens a packet socket on lo; call it inside the namespace.
func newUDPTally() (*udpTally, error) {
	const proto = unix.ETH_P_IP>>8 | unix.ETH_P_IP&0xff<<8 // network byte order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: lo.Index})
	}
	if err == nil {
		// Wake every 50 ms to see whether to stop.
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<20)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("packet socket on lo: %w", err)
	}
	return &udpTally{fd: fd}, nil
}

// start counts the datagrams from srcPort, classed by whether they are
// larger than one transport message on a tunnel of mtu bytes.
func (u *udpTally) start(srcPort uint16, mtu int) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		buf := make([]byte, 64)
		for !u.stop.Load() {
			n, from, err := unix.Recvfrom(u.fd, buf, unix.MSG_TRUNC)
			if err != nil {
				continue // the timeout, or EINTR
			}
			if _, ok := from.(*unix.SockaddrLinklayer); !ok || n < 28 || buf[0] != 0x45 || buf[9] != unix.IPPROTO_UDP ||
				uint16(buf[20])<<8|uint16(buf[21]) != srcPort {
				continue
			}
			// One transport message (at most MTU+32 bytes) in IPv4 and
			// UDP, or several behind one UDP header.
			if n <= 28+mtu+32 {
				u.single.Add(1)
				u.singleB.Add(int64(n))
			} else {
				u.gso.Add(1)
				u.gsoB.Add(int64(n))
			}
		}
	}()
}

// close stops the count and closes the socket. Idempotent.
func (u *udpTally) close() {
	u.closeOnce.Do(func() {
		u.stop.Store(true)
		u.wg.Wait()
		unix.Close(u.fd)
	})
}

// nsBind is a wireguard-go bind whose sockets are opened in a namespace:
// the device opens them from whichever goroutine brings it up.
type nsBind struct {
	conn.Bind
	ns *netns.NS
}

func (b nsBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	err = b.ns.Do(func() (err error) {
		fns, actual, err = b.Bind.Open(port)
		return err
	})
	return fns, actual, err
}

// TestWGUDPGSOWhole moves TCP through two wgnet networks whose
// wireguard-go devices talk over real UDP sockets, with UDP GSO, on the
// loopback of a namespace the test makes, and checks that the bulk of
// it leaves in UDP GSO packets the kernel sends whole. wireguard-go
// packs the packets of one device Read into GSO datagrams of up to 64
// KiB by its own count, which leaves out the link header: the kernel
// segments such a datagram in software into single sends. Before link/
// pktio filled the MTU (gVisor's segments were 1392 bytes at MTU 1420,
// 46 of which make 65504) and wgnet bounded each Read (ReadLimit), a
// third of the bytes went out as single datagrams; now none should.
func TestWGUDPGSOWhole(t *testing.T) {
	requireNamespaces(t)
	ns, err := netns.New("wggso")
	require.NoError(t, err)
	defer ns.Close()

	const mtu = 1420
	size := sized(64 << 20)
	addrs := [2]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")}
	var priv, pub [2]string
	for i := range priv {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		require.NoError(t, err)
		priv[i], pub[i] = hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes())
	}
	var nets [2]*wgnet.Net
	for i := range nets {
		tdev, tnet, err := wgnet.CreateNetTUN([]netip.Addr{addrs[i]}, nil, mtu)
		require.NoError(t, err)
		nets[i] = tnet
		dev := device.NewDevice(tdev, nsBind{conn.NewStdNetBind(), ns}, device.NewLogger(device.LogLevelError, fmt.Sprintf("wg%d: ", i)))
		defer dev.Close()
		// Ports below 32768; each peer at the other's, on lo.
		require.NoError(t, dev.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nendpoint=127.0.0.1:%d\nallowed_ip=%s/32\n",
			priv[i], 20001+i, pub[1-i], 20002-i, addrs[1-i])))
	}
	var tally *udpTally
	require.NoError(t, ns.Do(func() (err error) {
		tally, err = newUDPTally()
		return err
	}))
	defer tally.close()

	ln, err := nets[1].ListenTCP(&net.TCPAddr{Port: 5001})
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := nets[0].DialContextTCPAddrPort(ctx, netip.AddrPortFrom(addrs[1], 5001))
	require.NoError(t, err)
	tally.start(20001, mtu) // the sender's device: the data, not the ACKs
	// Large writes, as bulk senders make: 64 KiB super-segments.
	buf := make([]byte, 1<<20)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(2*time.Minute)))
	for sent := int64(0); sent < size; sent += int64(len(buf)) {
		_, err := c.Write(buf)
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	select {
	case n := <-got:
		require.Equal(t, size, n)
	case <-time.After(2 * time.Minute):
		require.FailNow(t, "the transfer did not finish")
	}
	tally.close()
	gsoB, singleB := tally.gsoB.Load(), tally.singleB.Load()
	t.Logf("lo sent %d UDP GSO packets (%d MiB) and %d single datagrams (%d MiB)", tally.gso.Load(), gsoB>>20, tally.single.Load(), singleB>>20)
	if tally.gso.Load() == 0 {
		skip(t, "wireguard-go sent no UDP GSO packet on lo: this kernel offers no UDP GSO, so there is nothing to check")
	}
	// Handshakes, keepalives, ACK-only batches and the tails of
	// super-segments go singly; they carry far less than 1% of the data.
	require.Less(t, singleB, size/100, "bulk data went out in single datagrams: UDP GSO packets were split")
}
