package stack_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

var families = []struct {
	name   string
	client netip.Addr
	server netip.Addr
}{{"ipv4", stacktest.A4, stacktest.B4}, {"ipv6", stacktest.A6, stacktest.B6}}

func TestUDPEcho(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			p := stacktest.New(t, nil)
			srv, err := p.B.ListenUDP(netip.AddrPortFrom(f.server, 7))
			require.NoError(t, err)
			echoPackets(t, srv)
			c, err := p.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(f.server, 7))
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			buf := make([]byte, 65536)
			for _, size := range []int{1, 120, 1400, 8000, 60000} {
				msg := make([]byte, size)
				for i := range msg {
					msg[i] = byte(i * 7)
				}
				_, err := c.Write(msg)
				require.NoError(t, err)
				n, err := c.Read(buf)
				require.NoError(t, err)
				require.Equal(t, msg, buf[:n], "echo of %d bytes", size)
			}
			require.Equal(t, f.client.String(), netip.MustParseAddrPort(c.LocalAddr().String()).Addr().String())
		})
	}
}

func TestPing(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			p := stacktest.New(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rtt, err := p.A.Ping(ctx, f.server, []byte("ustack ping"))
			require.NoError(t, err)
			require.Positive(t, rtt)
			st := p.B.Stats()
			if f.server.Is4() {
				require.NotZero(t, st.Counter("ICMP.V4.PacketsReceived.EchoRequest"))
			} else {
				require.NotZero(t, st.Counter("ICMP.V6.PacketsReceived.EchoRequest"))
			}
		})
	}
}

func TestPingUnreachableTimesOut(t *testing.T) {
	p := stacktest.New(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// On-link, but nobody has the address: the request is sent and lost.
	_, err := p.A.Ping(ctx, netip.MustParseAddr("198.18.0.99"), nil)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// fastRTO lowers the RTO floor for tests over lossy links, where at 5% loss
// a transfer otherwise spends most of its time in 200 ms timeouts, and its
// ceiling, so that a run of losses on a loaded machine does not back off
// for minutes. It changes how soon TCP retransmits, not what it delivers.
func fastRTO() *stack.Options {
	o := stack.DefaultTCPOptions()
	o.MinRTO = 10 * time.Millisecond
	o.MaxRTO = time.Second
	return &stack.Options{TCP: &o}
}

// TestTCPTransferImpaired checks that TCP delivers every byte intact over a
// link that loses, reorders and duplicates.
func TestTCPTransferImpaired(t *testing.T) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			im := link.Impairments{Loss: 0.05, Reorder: 0.02, Duplicate: 0.02, Seed: 7}
			p := stacktest.New(t, &stacktest.Options{WrapLink: stacktest.Impaired(im), Stack: fastRTO()})
			transferBothWays(t, p, f.server, impairedSize)
			la, lb := p.LinkStats()
			require.NotZero(t, la.ImpairLost+lb.ImpairLost, "loss was injected")
			require.NotZero(t, la.ImpairReordered+lb.ImpairReordered, "reordering was injected")
			require.NotZero(t, la.ImpairDuplicated+lb.ImpairDuplicated, "duplication was injected")
		})
	}
}

// TestTCPTransferFaultsEveryQdisc runs a transfer both ways through every
// queueing discipline over a link that loses, reorders, duplicates and
// corrupts: each ends intact.
func TestTCPTransferFaultsEveryQdisc(t *testing.T) {
	for _, q := range sched.Names() {
		t.Run(q, func(t *testing.T) {
			mo := mem.DefaultOptions()
			mo.ChecksumOffload = false
			im := link.Impairments{Loss: 0.02, Reorder: 0.01, Duplicate: 0.01, Corrupt: 0.02, Seed: 11}
			p := stacktest.New(t, &stacktest.Options{Mem: &mo, WrapLink: stacktest.Impaired(im), Qdisc: q, Stack: fastRTO()})
			transferBothWays(t, p, stacktest.B4, impairedSize/4)
			la, lb := p.LinkStats()
			require.NotZero(t, la.ImpairLost+lb.ImpairLost)
			require.NotZero(t, la.ImpairCorrupted+lb.ImpairCorrupted)
		})
	}
}

// TestTCPTransferCorrupted checks that a corrupted packet is caught by the
// checksums (offload off) and the data still arrives intact.
func TestTCPTransferCorrupted(t *testing.T) {
	mo := mem.DefaultOptions()
	mo.ChecksumOffload = false
	im := link.Impairments{Corrupt: 0.01, Seed: 3}
	p := stacktest.New(t, &stacktest.Options{Mem: &mo, WrapLink: stacktest.Impaired(im), Stack: fastRTO()})
	transferBothWays(t, p, stacktest.B4, impairedSize)
	la, lb := p.LinkStats()
	require.NotZero(t, la.ImpairCorrupted+lb.ImpairCorrupted)
}

func TestTCPTransferGSO(t *testing.T) {
	mo := mem.DefaultOptions()
	mo.GSO = true
	p := stacktest.New(t, &stacktest.Options{Mem: &mo})
	transferBothWays(t, p, stacktest.B6, transferSize/4)
	la := p.LinkA.LinkStats()
	require.Greater(t, la.TXBytes/la.TXPackets, uint64(mem.DefaultMTU), "GSO carried super-segments")
}

func TestTCPTransferEveryQdisc(t *testing.T) {
	for _, q := range sched.Names() {
		t.Run(q, func(t *testing.T) {
			p := stacktest.New(t, &stacktest.Options{Qdisc: q})
			transferBothWays(t, p, stacktest.B4, 4<<20)
			st := p.A.Stats()
			require.Equal(t, q, st.NICs[0].Qdisc)
		})
	}
}

func TestNetTestConn(t *testing.T) { netTestConn(t, nil) }

// netTestConn runs x/net's conformance suite on TCP conns between two
// stacks built with opts.
func netTestConn(t *testing.T, opts *stacktest.Options) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		p, err := stacktest.Build(opts)
		if err != nil {
			return nil, nil, nil, err
		}
		ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 80))
		if err != nil {
			p.Close()
			return nil, nil, nil, err
		}
		defer ln.Close()
		accepted := acceptOne(ln)
		c1, err = p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 80))
		if err != nil {
			p.Close()
			return nil, nil, nil, err
		}
		c2 = <-accepted
		if c2 == nil {
			c1.Close()
			p.Close()
			return nil, nil, nil, errors.New("accept failed")
		}
		stop = func() {
			c1.Close()
			c2.Close()
			p.Close()
		}
		return c1, c2, stop, nil
	})
}

func TestDialRefused(t *testing.T) {
	p := stacktest.New(t, nil)
	_, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 9))
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "dial", op.Op)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
}

func TestDialContextCanceled(t *testing.T) {
	p := stacktest.New(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Nobody answers on this on-link address, so the SYN goes unanswered.
	_, err := p.A.DialTCP(ctx, netip.MustParseAddrPort("198.18.0.77:80"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestListenPortInUse(t *testing.T) {
	p := stacktest.New(t, nil)
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 80))
	require.NoError(t, err)
	defer ln.Close()
	_, err = p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 80))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
}

func TestBadArguments(t *testing.T) {
	s, err := stack.New(nil)
	require.NoError(t, err)
	defer s.Close()
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()

	_, err = s.AddNIC(a, &stack.NICOptions{Qdisc: "nope"})
	var unknown *sched.UnknownError
	require.ErrorAs(t, err, &unknown)
	require.Contains(t, err.Error(), "fifo", "the error lists the valid names")
	_, err = s.AddNIC(nil, nil)
	require.Error(t, err)

	id, err := s.AddNIC(a, nil)
	require.NoError(t, err)
	require.Error(t, s.AddAddress(id, netip.Prefix{}))
	require.Error(t, s.AddAddress(99, netip.MustParsePrefix("198.18.5.1/24")))
	require.Error(t, s.AddRoute(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParseAddr("fd00::1"), id))
	require.Error(t, s.AddRoute(netip.MustParsePrefix("10.0.0.0/8"), netip.Addr{}, 99))
	require.Error(t, s.SetDefaultGateway(netip.Addr{}, id))
	_, err = s.DialTCP(context.Background(), netip.MustParseAddrPort("0.0.0.0:80"))
	require.Error(t, err)
	_, err = s.DialUDP(netip.MustParseAddrPort("[fd00::1]:5"), netip.MustParseAddrPort("198.18.0.2:5"))
	require.Error(t, err)

	_, err = stack.New(&stack.Options{TCP: &stack.TCPOptions{CongestionControl: "bbr"}})
	require.ErrorContains(t, err, "cubic")
	low := stack.DefaultTCPOptions()
	low.MaxRTO = low.MinRTO / 2
	_, err = stack.New(&stack.Options{TCP: &low})
	require.ErrorContains(t, err, "maximum RTO")
}

func TestClosedStack(t *testing.T) {
	s, err := stack.New(nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, err = s.ListenTCP(netip.MustParseAddrPort("198.18.0.1:80"))
	require.ErrorIs(t, err, stack.ErrClosed)
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	defer b.Close()
	defer a.Close()
	_, err = s.AddNIC(a, nil)
	require.ErrorIs(t, err, stack.ErrClosed)
}

func TestDefaultGateway(t *testing.T) {
	p := stacktest.New(t, nil)
	// B also answers for an address outside the shared subnet; A reaches it
	// through B as its default gateway.
	nic := p.B.Stats().NICs[0].ID
	require.NoError(t, p.B.AddAddress(nic, netip.MustParsePrefix("198.19.1.1/32")))
	require.NoError(t, p.A.SetDefaultGateway(stacktest.B4, p.A.Stats().NICs[0].ID))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.A.Ping(ctx, netip.MustParseAddr("198.19.1.1"), []byte("via gateway"))
	require.NoError(t, err)
}

func TestStatsAccounting(t *testing.T) {
	p := stacktest.New(t, nil)
	transferBothWays(t, p, stacktest.B4, 1<<20)
	sa, sb := p.A.Stats(), p.B.Stats()
	require.NotZero(t, sa.Counter("TCP.SegmentsSent"))
	na, ok := sa.NIC("a")
	require.True(t, ok)
	require.True(t, na.HasLink)
	nb, _ := sb.NIC("b")
	// Conservation on the wire: what A's link accepted, B's link delivered,
	// still holds, or dropped with a reason (no impairment here).
	backlog := uint64(p.LinkB.Backlog())
	require.Equal(t, na.Link.TXPackets, nb.Link.RXPackets+backlog+nb.Link.RXDetached+nb.Link.RXMalformed)
	// gVisor counts a pure ACK as sent when the delayed ACK takes it:
	// those an answer carried never reach the link, and one still held
	// only when its delay runs out, so wait for none to be held.
	require.Eventually(t, func() bool {
		na, _ := p.A.Stats().NIC("a")
		return na.DelayedACK.Holding == 0
	}, 10*time.Second, time.Millisecond)
	na, _ = p.A.Stats().NIC("a")
	require.Equal(t, na.GVisor["Tx.Packets"], na.Link.TXPackets+na.DelayedACK.Merged, "gVisor's NIC count matches the link's, less the ACKs answers carried")
}

// TestUDPRecvErrReleasesErrorQueue provokes ICMP port-unreachable errors at
// a socket with IP_RECVERR and closes it: gVisor keeps a copy of each
// offending datagram on the socket's error queue, and TestMain's leak check
// fails if Close does not release them.
func TestUDPRecvErrReleasesErrorQueue(t *testing.T) {
	p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{UDPRecvErr: true}})
	c, err := p.A.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(stacktest.B4, 9))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c.Write([]byte("anyone there?")) // refused (ECONNREFUSED) once an error arrived
		return p.A.Stats().Counter("ICMP.V4.PacketsReceived.DstUnreachable") >= 3
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	_, ok := c.(net.PacketConn)
	require.True(t, ok, "a UDP conn is also a PacketConn")
}

// TestQdiscBackpressureThroughStack runs TCP over a 16-packet ring, so the
// link refuses all the time: our qdiscs must requeue and resume on the
// link's writability signal, and the data must still arrive intact.
func TestQdiscBackpressureThroughStack(t *testing.T) {
	for _, q := range []string{sched.RootLock, sched.BusyLock, sched.EnqLock, sched.LList} {
		t.Run(q, func(t *testing.T) {
			mo := mem.DefaultOptions()
			mo.RingSize = 16
			p := stacktest.New(t, &stacktest.Options{Mem: &mo, Qdisc: q})
			transferBothWays(t, p, stacktest.B4, 4<<20)
			st := p.A.Stats()
			nic := st.NICs[0]
			require.True(t, nic.HasQdiscStats)
			qs := nic.QdiscStats
			require.Equal(t, q, qs.Strategy)
			require.Positive(t, qs.LinkFull, "the ring filled")
			require.Positive(t, qs.Requeued, "refused packets went back to the queue")
			require.Positive(t, qs.WritableWakeups, "the link said when it had room")
			require.Equal(t, qs.Enqueued, qs.Sent+qs.Dropped.Total()+uint64(qs.Backlog))
			require.Equal(t, nic.Link.TXPackets, qs.Sent, "what the qdisc sent, the link took")
		})
	}
}

// TestDelayedACKRequestResponse: on a request/response exchange the
// answers carry the ACKs of the requests they answer (the NICs merge
// pure ACKs), every byte arrives, and with DelayedACK negative no ACK
// is held.
func TestDelayedACKRequestResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"default", 0}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			tcpOpts := stack.DefaultTCPOptions()
			tcpOpts.DelayedACK = tc.delay
			p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{TCP: &tcpOpts}})
			ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 7))
			require.NoError(t, err)
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						done <- nil
						return
					}
					b[0]++
					if _, err := c.Write(b); err != nil {
						done <- err
						return
					}
				}
			}()
			c, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 7))
			require.NoError(t, err)
			b := []byte{0}
			for i := range 2000 {
				_, err := c.Write([]byte{byte(i)})
				require.NoError(t, err)
				_, err = c.Read(b)
				require.NoError(t, err)
				require.Equal(t, byte(i+1), b[0])
			}
			require.NoError(t, c.Close())
			require.NoError(t, <-done)
			var merged uint64
			for _, s := range []*stack.Stack{p.A, p.B} {
				for _, n := range s.Stats().NICs {
					merged += n.DelayedACK.Merged
				}
			}
			if tc.delay < 0 {
				require.Zero(t, merged)
			} else {
				require.NotZero(t, merged, "no answer carried a held ACK")
			}
		})
	}
}

// TestTCPOptionsZeroMeansDefault: a zero field of TCPOptions is its
// default, field by field, read back from gVisor; the expected values are
// written here, not taken from DefaultTCPOptions.
func TestTCPOptionsZeroMeansDefault(t *testing.T) {
	type want struct {
		sack, rack, moderate bool
		cc                   string
		minRTO, maxRTO       time.Duration
		snd, rcv             tcpip.TCPSendBufferSizeRangeOption
	}
	def := want{sack: true, rack: true, moderate: true, cc: "cubic", minRTO: 200 * time.Millisecond, maxRTO: 120 * time.Second,
		snd: tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20},
		rcv: tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20}}
	for _, tc := range []struct {
		name string
		opts *stack.TCPOptions
		edit func(*want)
	}{
		{"nil", nil, func(*want) {}},
		{"zero", &stack.TCPOptions{}, func(*want) {}},
		{"MinRTO alone", &stack.TCPOptions{MinRTO: 50 * time.Millisecond}, func(w *want) { w.minRTO = 50 * time.Millisecond }},
		{"MaxRTO alone", &stack.TCPOptions{MaxRTO: time.Second}, func(w *want) { w.maxRTO = time.Second }},
		{"reno", &stack.TCPOptions{CongestionControl: "reno"}, func(w *want) { w.cc = "reno" }},
		{"off switches", &stack.TCPOptions{NoSACK: true, NoRACK: true, FixedReceiveBuffer: true}, func(w *want) { w.sack, w.rack, w.moderate = false, false, false }},
		{"receive max below the default", &stack.TCPOptions{ReceiveBuffer: stack.BufferRange{Max: 64 << 10}}, func(w *want) { w.rcv.Default, w.rcv.Max = 64<<10, 64<<10 }},
		{"send default above the max", &stack.TCPOptions{SendBuffer: stack.BufferRange{Default: 16 << 20}}, func(w *want) { w.snd.Default, w.snd.Max = 16<<20, 16<<20 }},
		{"send min alone", &stack.TCPOptions{SendBuffer: stack.BufferRange{Min: 8192}}, func(w *want) { w.snd.Min = 8192 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := stack.New(&stack.Options{TCP: tc.opts})
			require.NoError(t, err)
			defer s.Close()
			w := def
			tc.edit(&w)
			g := s.GVisor()
			var sack tcpip.TCPSACKEnabled
			var cc tcpip.CongestionControlOption
			var rec tcpip.TCPRecovery
			var mod tcpip.TCPModerateReceiveBufferOption
			var minRTO tcpip.TCPMinRTOOption
			var maxRTO tcpip.TCPMaxRTOOption
			var snd tcpip.TCPSendBufferSizeRangeOption
			var rcv tcpip.TCPReceiveBufferSizeRangeOption
			for _, o := range []tcpip.GettableTransportProtocolOption{&sack, &cc, &rec, &mod, &minRTO, &maxRTO, &snd, &rcv} {
				require.Nil(t, g.TransportProtocolOption(tcp.ProtocolNumber, o), "%T", o)
			}
			require.Equal(t, w.sack, bool(sack), "SACK")
			require.Equal(t, w.cc, string(cc), "congestion control")
			require.Equal(t, w.rack, rec&tcpip.TCPRACKLossDetection != 0, "RACK")
			require.Equal(t, w.moderate, bool(mod), "receive buffer moderation")
			require.Equal(t, w.minRTO, time.Duration(minRTO), "minimum RTO")
			require.Equal(t, w.maxRTO, time.Duration(maxRTO), "maximum RTO")
			require.Equal(t, w.snd, snd, "send buffer")
			require.Equal(t, w.rcv, tcpip.TCPSendBufferSizeRangeOption(rcv), "receive buffer")
		})
	}
	_, err := stack.New(&stack.Options{TCP: &stack.TCPOptions{MinRTO: -time.Second}})
	require.ErrorContains(t, err, "minimum RTO")
}
