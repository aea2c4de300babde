package forward

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// dead is a Handler whose upstream never answers for the destinations in
// dead (the request waits until its context ends, then is dropped, as
// Relay's dial to a blackhole would end) and answers at once for the
// others (Accept, and the conn is held until the test ends).
type dead struct {
	prefix netip.Prefix
	mu     sync.Mutex
	held   []net.Conn
	saw    atomic.Int64 // requests the handler got
}

func (d *dead) HandleTCP(r *TCPRequest) {
	d.saw.Add(1)
	if d.prefix.Contains(r.Dst().Addr()) {
		<-r.Context().Done()
		r.Reject(false)
		return
	}
	c, err := r.Accept()
	if err != nil {
		return
	}
	d.mu.Lock()
	d.held = append(d.held, c)
	d.mu.Unlock()
}

func (d *dead) HandleUDP(*UDPFlow) {}

func (d *dead) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.held {
		c.Close()
	}
	d.held = nil
}

func newDead(t *testing.T, prefix string) *dead {
	d := &dead{prefix: netip.MustParsePrefix(prefix)}
	t.Cleanup(d.close)
	return d
}

// dials runs n dials at once from A, each with dial, and counts how they
// end; wait waits for all of them (bounded by their context).
type dials struct {
	wg                sync.WaitGroup
	ok, refused, fail atomic.Int64
	mu                sync.Mutex
	conns             []net.Conn
}

func (ds *dials) start(n int, dial func(i int) (net.Conn, error)) {
	for i := range n {
		ds.wg.Add(1)
		go func() {
			defer ds.wg.Done()
			c, err := dial(i)
			switch {
			case err == nil:
				ds.ok.Add(1)
				ds.mu.Lock()
				ds.conns = append(ds.conns, c)
				ds.mu.Unlock()
			case errors.Is(err, syscall.ECONNREFUSED):
				ds.refused.Add(1)
			default:
				ds.fail.Add(1)
			}
		}()
	}
}

func (ds *dials) wait() {
	ds.wg.Wait()
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, c := range ds.conns {
		c.Close()
	}
}

// TestHandshakeBurst opens many connections at once to one destination
// that answers: none is refused, though they are far more than a
// destination's share of MaxHalfOpen. The first share start and the rest
// wait (the test holds the handler's answers until they do); the first
// answer shows that the destination answers, and the rest start at once,
// costing no half-open slot.
func TestHandshakeBurst(t *testing.T) {
	const n, share = 300, DefaultMaxHalfOpen / 4 // n: more than MaxHalfOpen itself
	gate := make(chan struct{})
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	// A SlowHandshake far beyond the test: the waiting handshakes must
	// start on the first answer, not be refused for their wait.
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		if c, err := r.Accept(); err == nil {
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}}, &Options{MemoryBudget: -1, SlowHandshake: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ds dials
	ds.start(n, func(int) (net.Conn, error) { return e.A.DialTCP(ctx, farDst) })
	require.Eventually(t, func() bool {
		st := e.fw.Stats()
		return st.Handshakes == share && st.HalfOpen == share && st.HandshakesWaiting == n-share
	}, 30*time.Second, time.Millisecond, "a share of the burst starts, the rest waits")
	close(gate)
	ds.wait()
	require.Equal(t, int64(n), ds.ok.Load(), "refused %d, failed %d", ds.refused.Load(), ds.fail.Load())
	st := e.fw.Stats()
	require.Zero(t, st.Refused[HalfOpen])
	require.Zero(t, st.HalfOpen)
	require.Zero(t, st.Handshakes)
	require.Zero(t, st.HandshakesWaiting)
}

// TestHalfOpenSequential opens more than a destination's share of
// MaxHalfOpen connections to it, one after another: each handshake's
// count is released when it is answered, in the strict mode too (where
// every handshake counts).
func TestHalfOpenSequential(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow time.Duration
	}{{"default", 0}, {"strict", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDead(t, "203.0.113.128/25")
			e := newEnv(t, d, &Options{MaxHalfOpen: 16, SlowHandshake: tc.slow})
			for i := range 3 * 16 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c, err := e.A.DialTCP(ctx, farDst)
				cancel()
				require.NoError(t, err, "connection %d", i)
				c.Close()
			}
			require.Zero(t, e.fw.Stats().Refused[HalfOpen])
			require.Zero(t, e.fw.Stats().HalfOpen)
		})
	}
}

// TestHalfOpenShare floods one destination that never answers: it holds
// its share of the half-open slots (a quarter), the handshakes beyond it
// wait SlowHandshake and are then refused with resets, and connections
// elsewhere, from the same peer, still get through.
func TestHalfOpenShare(t *testing.T) {
	blackhole := netip.MustParseAddrPort("203.0.113.200:80")
	const n, share = 256, DefaultMaxHalfOpen / 4
	d := newDead(t, "203.0.113.128/25")
	e := newEnv(t, d, &Options{SlowHandshake: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var ds dials
	ds.start(n, func(int) (net.Conn, error) { return e.A.DialTCP(ctx, blackhole) })
	defer func() { cancel(); ds.wait() }()
	require.Eventually(t, func() bool { return ds.refused.Load() == n-share }, 30*time.Second, time.Millisecond,
		"the handshakes beyond the share are refused with resets (refused %d)", ds.refused.Load())
	st := e.fw.Stats()
	require.Equal(t, int64(share), st.HalfOpen, "one destination holds its share of half-open slots")
	require.Zero(t, st.HandshakesWaiting)
	require.GreaterOrEqual(t, st.Refused[HalfOpen], uint64(n-share))
	c, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err, "a flow elsewhere gets through while the blackhole holds its share")
	c.Close()
}

// dialFrom connects from src, an address of st's, to dst, returning the
// connect's error as the stack's conns do.
func dialFrom(ctx context.Context, st *stack.Stack, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	var wq waiter.Queue
	ep, terr := st.GVisor().NewEndpoint(tcp.ProtocolNumber, header.IPv4ProtocolNumber, &wq)
	if terr != nil {
		return nil, stack.TranslateError(terr)
	}
	if terr := ep.Bind(tcpip.FullAddress{Addr: tcpip.AddrFrom4(src.As4())}); terr != nil {
		ep.Close()
		return nil, stack.TranslateError(terr)
	}
	entry, ready := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	terr = ep.Connect(tcpip.FullAddress{Addr: tcpip.AddrFrom4(dst.Addr().As4()), Port: dst.Port()})
	if _, started := terr.(*tcpip.ErrConnectStarted); started {
		select {
		case <-ready:
			terr = ep.LastError()
		case <-ctx.Done():
			ep.Close()
			return nil, ctx.Err()
		}
	}
	if terr != nil {
		ep.Close()
		return nil, stack.TranslateError(terr)
	}
	return st.NewTCPConn(&wq, ep), nil
}

// TestHalfOpenPerPeer has one peer flood many destinations that never
// answer: it holds half the half-open slots at most, so another peer's
// connections to destinations not yet known to answer still start.
func TestHalfOpenPerPeer(t *testing.T) {
	d := newDead(t, "203.0.113.128/25")
	// Waiting handshakes wait longer than the test: the flood's stay.
	e := newEnv(t, d, &Options{SlowHandshake: time.Hour})
	other := netip.MustParseAddr("198.18.0.3")
	require.NoError(t, e.A.AddAddress(e.nicA, netip.PrefixFrom(other, 24)))
	const flood, share = 300, DefaultMaxHalfOpen / 2
	ctx, cancel := context.WithCancel(context.Background())
	var ds dials
	ds.start(flood, func(i int) (net.Conn, error) {
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(128 + i%127)}), uint16(1000+i))
		return dialFrom(ctx, e.A, stacktest.A4, dst)
	})
	defer func() { cancel(); ds.wait() }()
	require.Eventually(t, func() bool {
		st := e.fw.Stats()
		return st.HalfOpen == share && st.HandshakesWaiting == flood-share
	}, 30*time.Second, time.Millisecond, "the flooding peer holds its share, the rest wait")
	// The other peer's connects to destinations never seen, which count
	// from their SYN, start.
	for i := range 8 {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := dialFrom(dctx, e.A, other, netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i)}), 80))
		dcancel()
		require.NoError(t, err, "the other peer's connect %d", i)
		c.Close()
	}
}

// TestHalfOpenLateRefusal lets handshakes to a destination that answers
// turn slow with no room left: they are refused then, with resets, and
// their handler's context is cancelled (the dial upstream ends).
func TestHalfOpenLateRefusal(t *testing.T) {
	dst := netip.MustParseAddrPort("203.0.113.200:80")
	var answer atomic.Bool
	answer.Store(true)
	cancelled := make(chan struct{}, 8)
	e := newEnv(t, funcs{tcp: func(r *TCPRequest) {
		if answer.Load() {
			if c, err := r.Accept(); err == nil {
				c.Close()
			}
			return
		}
		<-r.Context().Done()
		cancelled <- struct{}{}
	}}, &Options{MaxHalfOpen: 4, SlowHandshake: 100 * time.Millisecond})
	c, err := e.A.DialTCP(context.Background(), dst)
	require.NoError(t, err, "the destination answers")
	c.Close()
	answer.Store(false)
	// Three handshakes start free (their destination answers); once they
	// are slow, the destination's share (one) takes the first.
	ctx, cancel := context.WithCancel(context.Background())
	var ds dials
	ds.start(3, func(int) (net.Conn, error) { return e.A.DialTCP(ctx, dst) })
	defer func() { cancel(); ds.wait() }()
	require.Eventually(t, func() bool { return ds.refused.Load() == 2 }, 30*time.Second, time.Millisecond, "two refused with resets")
	for range 2 {
		recv(t, cancelled, "a refused handshake's context is cancelled")
	}
	st := e.fw.Stats()
	require.Equal(t, uint64(2), st.Refused[HalfOpen])
	require.Equal(t, int64(1), st.HalfOpen)
}

// TestSynWithRstOrFin sends SYNs with RST or FIN also set: they open
// nothing (no handler call, no SYN-ACK) and are counted as Malformed.
func TestSynWithRstOrFin(t *testing.T) {
	d := newDead(t, "203.0.113.128/25")
	e := newEnv(t, d, nil)
	for i, flags := range []header.TCPFlags{header.TCPFlagSyn | header.TCPFlagRst, header.TCPFlagSyn | header.TCPFlagFin, header.TCPFlagSyn | header.TCPFlagFin | header.TCPFlagRst} {
		writeSegment(t, e, stacktest.A4, farDst, uint16(30000+i), flags)
	}
	require.Eventually(t, func() bool { return e.fw.Stats().Refused[Malformed] == 3 }, 10*time.Second, time.Millisecond)
	// A well-formed connect afterwards is served: the ones before it
	// would have been by now.
	c, err := e.A.DialTCP(context.Background(), farDst)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, int64(1), d.saw.Load(), "the handler saw only the real connect")
	require.Equal(t, int32(1), e.tap.synAcks.Load(), "one SYN-ACK: the real connect's")
	// Counted once Accept returns, which may be after A saw the SYN-ACK.
	require.Eventually(t, func() bool { return e.fw.Stats().TCPOpened == 1 }, 10*time.Second, time.Millisecond)
}

// writeSegment sends B a bare TCP segment (no payload) from A's NIC,
// below A's TCP.
func writeSegment(t *testing.T, e *env, src netip.Addr, dst netip.AddrPort, sport uint16, flags header.TCPFlags) {
	t.Helper()
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize)
	s, d := tcpip.AddrFrom4(src.As4()), tcpip.AddrFrom4(dst.Addr().As4())
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: s, DstAddr: d})
	ip.SetChecksum(^ip.CalculateChecksum())
	th := header.TCP(b[header.IPv4MinimumSize:])
	th.Encode(&header.TCPFields{SrcPort: sport, DstPort: dst.Port(), SeqNum: 1000, DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 65535})
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, s, d, header.TCPMinimumSize)
	th.SetChecksum(^th.CalculateChecksum(checksum.Checksum(nil, xsum)))
	if terr := e.A.GVisor().WriteRawPacket(e.nicA, header.IPv4ProtocolNumber, buffer.MakeWithData(b)); terr != nil {
		t.Fatalf("write a crafted segment: %v", terr)
	}
}
