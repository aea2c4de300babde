package forward

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/ustack-dev/ustack/internal/dnstest"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// dnsTestName is the name the tests ask for.
const dnsTestName = "ustack.test."

// startTCPResolver runs a DNS server on loopback that listens on TCP
// only and answers dnsTestName with records A records, so the tests
// choose the answer's size, until the test ends.
func startTCPResolver(t *testing.T, records int) (netip.AddrPort, *dnstest.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addrs := make([]netip.Addr, records)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i + 1)})
	}
	s := dnstest.New(dnstest.Zone{dnsTestName: addrs})
	s.ServeStream(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().(*net.TCPAddr).AddrPort(), s
}

// dnsQueryMsg is an A query for dnsTestName, with an EDNS0 OPT record offering
// udpSize if it is not zero.
func dnsQueryMsg(t *testing.T, id uint16, udpSize int) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	require.NoError(t, b.StartQuestions())
	require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(dnsTestName), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}))
	if udpSize > 0 {
		require.NoError(t, b.StartAdditionals())
		var rh dnsmessage.ResourceHeader
		require.NoError(t, rh.SetEDNS0(udpSize, dnsmessage.RCodeSuccess, false))
		require.NoError(t, b.OPTResource(rh, dnsmessage.OPTResource{}))
	}
	msg, err := b.Finish()
	require.NoError(t, err)
	return msg
}

// TestRelayDNSOverTCP has a relay whose dialer carries no UDP answer
// queries sent over UDP by asking the upstream over TCP through the
// dialer, truncating answers too long for the client's UDP, and still
// refuse the rest of UDP.
func TestRelayDNSOverTCP(t *testing.T) {
	relayAddr := netip.MustParseAddr("203.0.113.3")
	for _, tc := range []struct {
		name      string
		records   int // A records in the answer, 16 bytes each
		udpSize   int // EDNS0 payload size offered, 0 for none
		truncated bool
	}{
		{"small", 1, 0, false},
		{"over 512 bytes", 40, 0, true},
		{"EDNS0 room", 40, 4096, false},
		{"over EDNS0 room", 100, 1232, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, res := startTCPResolver(t, tc.records)
			pol := &Policy{DNS: []DNSRelay{{Addr: relayAddr, Upstream: upstream}}}
			e := newEnv(t, Relay(&tcpOnly{}, pol), nil)
			pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
			require.NoError(t, err)
			defer pc.Close()
			dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(relayAddr, 53))
			_, err = pc.WriteTo(dnsQueryMsg(t, 0x5a5a, tc.udpSize), dst)
			require.NoError(t, err)
			pc.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 1<<16)
			n, from, err := pc.ReadFrom(buf)
			require.NoError(t, err)
			require.Equal(t, dst.AddrPort(), from.(*net.UDPAddr).AddrPort(), "the answer comes from the relay address")
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			require.NoError(t, err)
			require.Equal(t, uint16(0x5a5a), h.ID)
			require.Equal(t, tc.truncated, h.Truncated, "TC set when the answer does not fit (%d bytes)", n)
			require.NoError(t, p.SkipAllQuestions())
			answers, err := p.AllAnswers()
			require.NoError(t, err)
			if tc.truncated {
				require.LessOrEqual(t, n, max(dnsUDPMin, tc.udpSize))
				require.Empty(t, answers)
			} else {
				require.Len(t, answers, tc.records)
			}
			require.Equal(t, int64(1), res.TCPQueries())
			require.Equal(t, uint64(1), e.fw.Stats().DNSQueries)

			// The same flow's other datagrams are refused, as is UDP
			// to anywhere else.
			_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.9:53")))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return e.fw.Stats().Refused[Unsupported] == 1 }, 10*time.Second, time.Millisecond)
			_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(relayAddr, 54)))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return e.fw.Stats().Refused[NoDNS] == 1 }, 10*time.Second, time.Millisecond)
		})
	}
}

// TestRelayNoUDPDNS: with Policy.NoUDP over host sockets, UDP is refused
// but DNS queries still reach the upstream, over TCP.
func TestRelayNoUDPDNS(t *testing.T) {
	relayAddr := netip.MustParseAddr("203.0.113.3")
	upstream, res := startTCPResolver(t, 1)
	pol := &Policy{NoUDP: true, DNS: []DNSRelay{{Addr: relayAddr, Upstream: upstream}}}
	e := newEnv(t, Relay(&net.Dialer{}, pol), nil)
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo(dnsQueryMsg(t, 7, 0), net.UDPAddrFromAddrPort(netip.AddrPortFrom(relayAddr, 53)))
	require.NoError(t, err)
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 1<<16)
	_, _, err = pc.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.TCPQueries())

	other, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer other.Close()
	_, err = other.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.9:53")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.fw.Stats().Refused[Unsupported] == 1 }, 10*time.Second, time.Millisecond,
		"a flow that starts with anything but a query is refused")
}
