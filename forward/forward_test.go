package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/proxy"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// tap records the TCP flags of what B sends, to see when a SYN-ACK
// leaves.
type tap struct {
	*mem.Endpoint
	synAcks atomic.Int32
}

func (t *tap) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	for _, p := range pkts.AsSlice() {
		if p.TransportProtocolNumber != header.TCPProtocolNumber {
			continue
		}
		if f := header.TCP(p.TransportHeader().Slice()).Flags(); f.Contains(header.TCPFlagSyn | header.TCPFlagAck) {
			t.synAcks.Add(1)
		}
	}
	return t.Endpoint.WritePackets(pkts)
}

// env is host A routing 203.0.113.0/24 (and fd00:203::/64) through host B,
// which runs a Forwarder.
type env struct {
	A, B *stack.Stack
	nicA tcpip.NICID
	tap  *tap
	fw   *Forwarder
}

var (
	far    = netip.MustParsePrefix("203.0.113.0/24")
	far6   = netip.MustParsePrefix("fd00:203::/64")
	farDst = netip.MustParseAddrPort("203.0.113.5:80")
)

func newEnv(t testing.TB, h Handler, o *Options) *env {
	t.Helper()
	la, lb, err := mem.Pair(nil)
	require.NoError(t, err)
	e := &env{tap: &tap{Endpoint: lb}}
	e.A, err = stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { e.A.Close() })
	ida, err := e.A.AddNIC(la, nil)
	require.NoError(t, err)
	e.nicA = ida
	require.NoError(t, e.A.AddAddress(ida, netip.PrefixFrom(stacktest.A4, 24)))
	require.NoError(t, e.A.AddAddress(ida, netip.PrefixFrom(stacktest.A6, 64)))
	require.NoError(t, e.A.AddRoute(far, stacktest.B4, ida))
	require.NoError(t, e.A.AddRoute(far6, stacktest.B6, ida))
	e.B, err = stack.New(&stack.Options{Transparent: true})
	require.NoError(t, err)
	t.Cleanup(func() { e.B.Close() })
	idb, err := e.B.AddNIC(e.tap, nil)
	require.NoError(t, err)
	require.NoError(t, e.B.AddAddress(idb, netip.PrefixFrom(stacktest.B4, 24)))
	require.NoError(t, e.B.AddAddress(idb, netip.PrefixFrom(stacktest.B6, 64)))
	e.fw, err = New(e.B, h, o)
	require.NoError(t, err)
	t.Cleanup(func() { e.fw.Close() })
	return e
}

// funcs is a Handler from functions.
type funcs struct {
	tcp func(*TCPRequest)
	udp func(*UDPFlow)
}

func (h funcs) HandleTCP(r *TCPRequest) {
	if h.tcp != nil {
		h.tcp(r)
	}
}

func (h funcs) HandleUDP(u *UDPFlow) {
	if h.udp != nil {
		h.udp(u)
	}
}

func TestNewNeedsRelayStack(t *testing.T) {
	st, err := stack.New(nil)
	require.NoError(t, err)
	defer st.Close()
	_, err = New(st, funcs{}, nil)
	require.ErrorIs(t, err, stack.ErrNotTransparent)
}

func TestTCPRequestBeforeHandshake(t *testing.T) {
	type seen struct{ src, dst netip.AddrPort }
	got := make(chan seen, 2)
	proceed := make(chan struct{})
	conns := make(chan net.Conn, 1)
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		got <- seen{r.Src(), r.Dst()}
		select {
		case <-proceed:
		case <-r.Context().Done(): // the test ended early
			return
		}
		if r.Dst().Port() == 81 {
			r.Reject(true)
			return
		}
		c, err := r.Accept()
		if err != nil {
			return
		}
		conns <- c
	}}, nil)

	dialed := make(chan error, 1)
	var ac net.Conn
	go func() {
		var err error
		ac, err = e.A.DialTCP(context.Background(), farDst)
		dialed <- err
	}()
	s := recv(t, got, "the handler gets the request")
	require.Equal(t, farDst, s.dst)
	require.Equal(t, stacktest.A4, s.src.Addr())
	require.Zero(t, e.tap.synAcks.Load(), "a SYN-ACK left before Accept")
	select {
	case err := <-dialed:
		t.Fatalf("the dial completed before Accept: %v", err)
	default:
	}
	close(proceed)
	require.NoError(t, recv(t, dialed, "the dial ends once the handler accepts"))
	defer ac.Close()
	require.Equal(t, s.src, ac.LocalAddr().(*net.TCPAddr).AddrPort(), "the handler saw A's exact source")
	require.Equal(t, int32(1), e.tap.synAcks.Load())
	bc := recv(t, conns, "the handler's conn")
	defer bc.Close()
	_, err := ac.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(bc, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = e.A.DialTCP(ctx, netip.AddrPortFrom(farDst.Addr(), 81))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), e.fw.Stats().Refused[Rejected])
}

// TestReject checks both kinds of refusal: with a reset the peer's
// connect fails at once with ECONNREFUSED (one in-memory round trip; the
// 5 s bound only stops a missing reset, which would leave the connect
// retrying for minutes, from taking longer); without, the SYN is dropped
// and the connect waits until it gives up (its context ends).
func TestReject(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reset   bool
		timeout time.Duration
		want    error
	}{
		{"reset", true, 5 * time.Second, syscall.ECONNREFUSED},
		{"silent", false, 2 * time.Second, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, funcs{tcp: func(r *TCPRequest) { r.Reject(tc.reset) }}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			_, err := e.A.DialTCP(ctx, farDst)
			require.ErrorIs(t, err, tc.want)
			if !tc.reset {
				require.NotErrorIs(t, err, syscall.ECONNREFUSED, "a silent reject sends no reset")
			}
			require.NotZero(t, e.fw.Stats().Refused[Rejected])
		})
	}
}

func TestUDPFullCone(t *testing.T) {
	second := netip.MustParseAddrPort("203.0.113.9:5353")
	type seen struct {
		src, dst netip.AddrPort
		data     string
	}
	got := make(chan seen, 1)
	e := newEnv(t, funcs{udp: func(u *UDPFlow) {
		buf := make([]byte, 1500)
		for {
			n, dst, err := u.ReadFromAddrPort(buf)
			if err != nil {
				return
			}
			got <- seen{u.Src(), dst, string(buf[:n])}
			// The reply from the address asked, then from another.
			u.WriteToAddrPort([]byte("one"), dst)
			u.WriteTo([]byte("two"), net.UDPAddrFromAddrPort(second))
		}
	}}, nil)
	for _, tc := range []struct {
		laddr netip.Addr
		dst   netip.AddrPort
		from2 netip.AddrPort
	}{
		{stacktest.A4, netip.MustParseAddrPort("203.0.113.5:53"), second},
		{stacktest.A6, netip.MustParseAddrPort("[fd00:203::5]:53"), netip.MustParseAddrPort("[fd00:203::9]:5353")},
	} {
		if tc.laddr.Is6() {
			second = tc.from2
		}
		pc, err := e.A.ListenUDP(netip.AddrPortFrom(tc.laddr, 0))
		require.NoError(t, err)
		_, err = pc.WriteTo([]byte("query"), net.UDPAddrFromAddrPort(tc.dst))
		require.NoError(t, err)
		s := recv(t, got, "the handler gets the datagram")
		require.Equal(t, tc.dst, s.dst)
		require.Equal(t, pc.LocalAddr().(*net.UDPAddr).AddrPort(), s.src)
		require.Equal(t, "query", s.data)
		buf := make([]byte, 100)
		for _, want := range []struct {
			from netip.AddrPort
			data string
		}{{tc.dst, "one"}, {tc.from2, "two"}} {
			pc.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, from, err := pc.ReadFrom(buf)
			require.NoError(t, err)
			require.Equal(t, want.data, string(buf[:n]))
			fa := from.(*net.UDPAddr).AddrPort()
			require.Equal(t, want.from, netip.AddrPortFrom(fa.Addr().Unmap(), fa.Port()))
		}
		pc.Close()
	}
	require.Equal(t, uint64(2), e.fw.Stats().UDPOpened)
}

func TestUDPIdleTimeout(t *testing.T) {
	ended := make(chan error, 1)
	e := newEnv(t, funcs{udp: func(u *UDPFlow) {
		buf := make([]byte, 100)
		for {
			if _, _, err := u.ReadFromAddrPort(buf); err != nil {
				ended <- err
				return
			}
		}
	}}, &Options{UDPIdleTimeout: 50 * time.Millisecond})
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.5:53")))
	require.NoError(t, err)
	require.ErrorIs(t, recv(t, ended, "the idle flow ends"), net.ErrClosed, "an idle flow ends")
	require.Eventually(t, func() bool { return e.fw.Stats().UDPFlows == 0 }, 10*time.Second, time.Millisecond)
}

func TestMemoryBudget(t *testing.T) {
	var mu sync.Mutex
	var held []net.Conn
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		c, err := r.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
	}}, &Options{TCPBuffer: 64 << 10, MemoryBudget: 2 * 2 * 64 << 10})
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	for i := range 2 {
		c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(farDst.Addr(), uint16(1000+i)))
		require.NoError(t, err)
		defer c.Close()
	}
	require.Equal(t, int64(2*2*64<<10), e.fw.Stats().MemoryReserved)
	_, err := e.A.DialTCP(context.Background(), farDst)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the flow beyond the budget is refused")
	require.Equal(t, uint64(1), e.fw.Stats().Refused[Budget])
}

func TestFlowLimits(t *testing.T) {
	e := newEnv(t, funcs{
		tcp: func(r *TCPRequest) {
			if c, err := r.Accept(); err == nil {
				<-r.Context().Done()
				c.Close()
			}
		},
		udp: func(u *UDPFlow) {
			buf := make([]byte, 100)
			for {
				if _, _, err := u.ReadFromAddrPort(buf); err != nil {
					return
				}
			}
		},
	}, &Options{MaxTCP: 1, MaxUDP: 1, MaxFlows: 3})
	c, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	defer c.Close()
	_, err = e.A.DialTCP(context.Background(), netip.AddrPortFrom(farDst.Addr(), 81))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), e.fw.Stats().Refused[TCPLimit])
	for i := range 2 {
		pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
		require.NoError(t, err)
		defer pc.Close()
		_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.5:53")))
		require.NoError(t, err)
		want := int64(1)
		if i == 1 {
			require.Eventually(t, func() bool { return e.fw.Stats().Refused[UDPLimit] == 1 }, 10*time.Second, time.Millisecond)
		}
		require.Eventually(t, func() bool { return e.fw.Stats().UDPFlows == want }, 10*time.Second, time.Millisecond)
	}
	// The total: one TCP and one UDP flow open, a DialTCP makes the third,
	// a fourth of any kind is refused.
	fw := e.fw
	fw.o.MaxTCP = 10
	d, err := fw.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.A4, 9))
	if err == nil {
		d.Close()
	}
	// A4:9 has no listener: A's reset is the errno, as from the kernel;
	// the dial was counted as a flow and then released.
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	c2, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(farDst.Addr(), 82))
	require.NoError(t, err)
	defer c2.Close()
	_, err = e.A.DialTCP(context.Background(), netip.AddrPortFrom(farDst.Addr(), 83))
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Equal(t, uint64(1), fw.Stats().Refused[FlowLimit])
}

func TestShutdownLetsTransferFinish(t *testing.T) {
	const size = shutdownSize
	conns := make(chan net.Conn, 1)
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		c, err := r.Accept()
		switch {
		case err != nil:
		case r.Dst() == farDst:
			conns <- c
		default:
			c.Close() // a probe accepted before Shutdown began
		}
	}}, nil)
	ac, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	bc := recv(t, conns, "the handler's conn")
	done := make(chan error, 1)
	go func() {
		_, err := xfer.Exchange(ac, bc, size, xfer.Timeout(size))
		ac.Close()
		bc.Close()
		done <- err
	}()
	shut := make(chan error, 1)
	go func() { shut <- e.fw.Shutdown(context.Background()) }()
	// New flows are refused while the transfer goes on.
	require.Eventually(t, func() bool {
		c, err := e.A.DialTCP(context.Background(), netip.AddrPortFrom(farDst.Addr(), 81))
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}, 30*time.Second, time.Millisecond)
	require.NoError(t, recv(t, done, "the transfer ends"), "the transfer finished intact during Shutdown")
	require.NoError(t, recv(t, shut, "Shutdown returns"))
	require.NotZero(t, e.fw.Stats().Refused[Closing])
}

func TestShutdownDeadlineCloses(t *testing.T) {
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		c, err := r.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c) // until the Forwarder aborts it
	}}, nil)
	ac, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	defer ac.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, e.fw.Shutdown(ctx), context.Canceled)
	require.Zero(t, e.fw.Stats().TCPFlows)
	_, err = ac.Read(make([]byte, 1))
	require.ErrorContains(t, err, "reset", "the open flow was reset")
}

// TestFlowsCountBytes sends different amounts each way, so that each
// direction's count is told from the other's.
func TestFlowsCountBytes(t *testing.T) {
	const up, down = 1 << 20, 256 << 10
	conns := make(chan net.Conn, 1)
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		if c, err := r.Accept(); err == nil {
			conns <- c
		}
	}}, nil)
	ac, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	defer ac.Close()
	bc := recv(t, conns, "the handler's conn")
	defer bc.Close()
	deadline := time.Now().Add(xfer.Timeout(up))
	require.NoError(t, ac.SetDeadline(deadline))
	require.NoError(t, bc.SetDeadline(deadline))
	for _, dir := range []struct {
		from, to net.Conn
		n        int64
	}{{ac, bc, up}, {bc, ac, down}} {
		sent := make(chan error, 1)
		go func() {
			_, err := io.Copy(dir.from, xfer.Pattern(1, dir.n))
			sent <- err
		}()
		_, err := io.CopyN(io.Discard, dir.to, dir.n)
		require.NoError(t, err)
		require.NoError(t, recv(t, sent, "the send ends"))
	}
	var flows []FlowInfo
	for fi := range e.fw.Flows() {
		flows = append(flows, fi)
	}
	require.Len(t, flows, 1)
	fi := flows[0]
	require.Equal(t, TCP, fi.Protocol)
	require.Equal(t, ac.LocalAddr().(*net.TCPAddr).AddrPort(), fi.Src)
	require.Equal(t, farDst, fi.Dst)
	require.Equal(t, uint64(up), fi.BytesUp, "from the peer")
	require.Equal(t, uint64(down), fi.BytesDown, "to the peer")
	require.NotEmpty(t, fi.State)
	require.NotZero(t, fi.Cwnd)
	require.False(t, fi.Opened.IsZero())
	st := e.fw.Stats()
	require.Equal(t, uint64(up), st.TCPBytesUp)
	require.Equal(t, uint64(down), st.TCPBytesDown)
}

// TestUDPQueue fills a UDP flow's queue while its handler does not read:
// what does not fit is dropped and counted, what does is delivered; the
// packet and byte counters count each way.
func TestUDPQueue(t *testing.T) {
	const queue, size, sent, replies = 1000, 100, 20, 3
	start := make(chan struct{})
	got := make(chan int, sent)
	e := newEnv(t, funcs{udp: func(u *UDPFlow) {
		select {
		case <-start:
		case <-time.After(30 * time.Second):
			return
		}
		u.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 1500)
		var dst netip.AddrPort
		for range queue / size {
			n, d, err := u.ReadFromAddrPort(buf)
			if err != nil {
				return
			}
			dst = d
			got <- n
		}
		for range replies {
			u.WriteToAddrPort(buf[:size/2], dst)
		}
	}}, &Options{UDPQueue: queue})
	var once sync.Once
	release := func() { once.Do(func() { close(start) }) }
	t.Cleanup(release) // before the Forwarder's Close, which waits for the handler
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	dst := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.5:53"))
	for range sent {
		_, err := pc.WriteTo(make([]byte, size), dst)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		st := e.fw.Stats()
		return st.UDPPacketsUp+st.UDPDropped == sent
	}, 10*time.Second, time.Millisecond, "every datagram is queued or dropped")
	st := e.fw.Stats()
	require.Equal(t, uint64(sent-queue/size), st.UDPDropped, "what does not fit the queue is dropped")
	require.Equal(t, uint64(queue/size), st.UDPPacketsUp)
	require.Equal(t, uint64(queue), st.UDPBytesUp)
	release()
	for range queue / size {
		require.Equal(t, size, recv(t, got, "the handler reads what was queued"))
	}
	buf := make([]byte, 1500)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(30*time.Second)))
	for range replies {
		m, _, err := pc.ReadFrom(buf)
		require.NoError(t, err)
		require.Equal(t, size/2, m)
	}
	st = e.fw.Stats()
	require.Equal(t, uint64(replies), st.UDPPacketsDown)
	require.Equal(t, uint64(replies*size/2), st.UDPBytesDown)
}

func TestCloseWithOpenFlows(t *testing.T) {
	e := newEnv(t, funcs{
		tcp: func(r *TCPRequest) {
			c, err := r.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(c, c)
		},
		udp: func(u *UDPFlow) {
			buf := make([]byte, 100)
			for {
				if _, _, err := u.ReadFromAddrPort(buf); err != nil {
					return
				}
			}
		},
	}, nil)
	ac, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	defer ac.Close()
	pc, err := e.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.WriteTo([]byte("x"), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.5:53")))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.fw.Stats().UDPFlows == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, e.fw.Close())
	st := e.fw.Stats()
	require.Zero(t, st.TCPFlows)
	require.Zero(t, st.UDPFlows)
	require.Zero(t, st.MemoryReserved)
	require.NoError(t, e.fw.Close(), "idempotent")
}

// pinger answers every echo request itself, from the address pinged.
type pinger struct {
	funcs
	seen chan netip.Addr
}

func (p pinger) HandlePing(req *PingRequest) {
	p.seen <- req.Dst()
	reply := append([]byte(nil), req.Message()...)
	req.Reply(req.Dst(), reply) // Reply sets the type, identifier and checksum
}

func TestPingHandler(t *testing.T) {
	p := pinger{seen: make(chan netip.Addr, 4)}
	e := newEnv(t, p, nil)
	for _, dst := range []netip.Addr{netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("fd00:203::5")} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := e.A.Ping(ctx, dst, []byte("are you there"))
		cancel()
		require.NoError(t, err, "ping %v answered by the handler", dst)
		require.Equal(t, dst, recv(t, p.seen, "the handler sees the ping"))
	}
	// Reply counts once its packet is handed to the link, which may be
	// after A has it.
	require.Eventually(t, func() bool { return e.fw.Stats().PingsDown == 2 }, 10*time.Second, time.Millisecond)
	// B's own address is answered by gVisor, not the handler.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.A.Ping(ctx, stacktest.B4, nil)
	require.NoError(t, err)
	require.Empty(t, p.seen)
}

func TestPingWithoutHandler(t *testing.T) {
	e := newEnv(t, funcs{}, nil)
	// No PingHandler: a ping to an address B does not own goes unanswered
	// (B must not fake reachability); B's own address answers.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := e.A.Ping(ctx, netip.MustParseAddr("203.0.113.5"), nil)
	cancel()
	require.Error(t, err)
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = e.A.Ping(ctx, stacktest.B6, nil)
	require.NoError(t, err)
}

// TestDialErrors checks the errors of the Forwarder's own dials: a
// refusal by a limit is a *RefusedError with its Reason inside the usual
// *net.OpError; a reset from the peer is ECONNREFUSED.
func TestDialErrors(t *testing.T) {
	e := newEnv(t, funcs{}, &Options{MaxTCP: 1, MaxUDP: 1})
	ln, err := e.A.ListenTCP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := e.fw.DialTCP(context.Background(), ln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	defer c.Close()
	peer := recv(t, accepted, "A accepts the Forwarder's connection")
	defer peer.Close()
	u, err := e.fw.DialUDP(netip.AddrPortFrom(stacktest.A4, 53))
	require.NoError(t, err)
	defer u.Close()

	for _, tc := range []struct {
		name   string
		dial   func() error
		reason Reason
	}{
		{"tcp", func() error {
			_, err := e.fw.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.A4, 9))
			return err
		}, TCPLimit},
		{"udp", func() error { _, err := e.fw.DialUDP(netip.AddrPortFrom(stacktest.A4, 54)); return err }, UDPLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.dial()
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			require.Equal(t, "dial", op.Op)
			var re *RefusedError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tc.reason, re.Reason)
			require.NotErrorIs(t, err, syscall.ECONNREFUSED, "a refusal of the Forwarder's is not the peer's reset")
		})
	}
	require.NoError(t, c.Close())
	_, err = e.fw.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.A4, 9))
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "A has no listener on port 9: its reset")
	var re *RefusedError
	require.False(t, errors.As(err, &re))
}

// recv takes a value from ch (the zero value if ch is closed, which is
// how a chan struct{} signals), failing the test if none comes within a
// generous bound: a test never waits unboundedly.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30 s", what)
	}
	var zero T
	return zero // not reached: Fatalf ends the test
}

// farNet is a dialer over a second userspace network (stack C, whose
// peer D owns 203.0.113.5 and fd00:203::5): no host sockets, but echo
// sockets of its own (PingListener), as a WireGuard tunnel's stack has.
type farNet struct{ c *stack.Stack }

func (n farNet) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return n.c.DialContext(ctx, network, address)
}

func (n farNet) ListenPing(_ context.Context, network string) (net.PacketConn, error) {
	if network == "ip6:ipv6-icmp" {
		return n.c.ListenPacket(network, "::")
	}
	return n.c.ListenPacket(network, "0.0.0.0")
}

// TestRelayPingsThroughDialer: Relay over a dialer that makes no host
// sockets sends pings through the dialer's own echo sockets
// (PingListener): A pings D through B's relay and C, both families, and
// OpenPing says pings are relayed; without the interface they are
// refused as Unsupported.
func TestRelayPingsThroughDialer(t *testing.T) {
	lc, ld, err := mem.Pair(nil)
	require.NoError(t, err)
	c, err := stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	d, err := stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	idc, err := c.AddNIC(lc, nil)
	require.NoError(t, err)
	idd, err := d.AddNIC(ld, nil)
	require.NoError(t, err)
	for _, a := range []struct {
		s  *stack.Stack
		id tcpip.NICID
		p  string
	}{{c, idc, "203.0.113.1/24"}, {c, idc, "fd00:203::1/64"}, {d, idd, "203.0.113.5/24"}, {d, idd, "fd00:203::5/64"}} {
		require.NoError(t, a.s.AddAddress(a.id, netip.MustParsePrefix(a.p)))
	}
	e := newEnv(t, Relay(farNet{c}, nil), nil)
	require.NoError(t, e.fw.OpenPing(), "the dialer's echo sockets carry pings")
	for _, dst := range []netip.Addr{netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("fd00:203::5")} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := e.A.Ping(ctx, dst, []byte("through the tunnel"))
		cancel()
		require.NoError(t, err, "ping %v relayed through the dialer's network", dst)
	}
	require.Eventually(t, func() bool { s := e.fw.Stats(); return s.PingsUp == 2 && s.PingsDown == 2 }, 10*time.Second, time.Millisecond)

	type dialOnly struct{ proxy.ContextDialer }
	e2 := newEnv(t, Relay(dialOnly{farNet{c}}, nil), nil)
	require.Error(t, e2.fw.OpenPing(), "no host sockets and no echo sockets: no pings")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = e2.A.Ping(ctx, netip.MustParseAddr("203.0.113.5"), nil)
	cancel()
	require.Error(t, err)
	require.Eventually(t, func() bool { return e2.fw.Stats().Refused[Unsupported] > 0 }, 10*time.Second, time.Millisecond)
}
