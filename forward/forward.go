package forward

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/ustack-dev/ustack/stack"
)

// Handler takes the flows a Forwarder intercepts. Its methods are called
// concurrently, each in a goroutine of its own that the Forwarder waits
// for in Close.
type Handler interface {
	// HandleTCP answers one TCP connection request: Accept or Reject it
	// before returning (an unanswered request is rejected with a reset).
	// It may keep running with the accepted conn; Close aborts the conn
	// and waits for HandleTCP to return.
	HandleTCP(req *TCPRequest)
	// HandleUDP serves one UDP flow (one peer socket, every destination)
	// until it closes: by the handler, idle for Options.UDPIdleTimeout, or
	// at Close.
	HandleUDP(flow *UDPFlow)
}

// PingHandler is what a Handler also implements to take ICMP echo
// requests to addresses the stack does not own (without it they are
// dropped, so the stack never fakes reachability).
type PingHandler interface {
	// HandlePing takes one echo request. It runs in the stack's receive
	// path and must not block.
	HandlePing(req *PingRequest)
}

// Forwarder intercepts the flows of a stack. It is safe for concurrent
// use.
type Forwarder struct {
	st   *stack.Stack
	gs   *gstack.Stack
	h    Handler
	ping PingHandler
	fwd  *tcp.Forwarder // gVisor's, which takes SYNs to handleTCP
	o    Options
	c    counters
	mtus map[tcpip.NICID]uint32 // of the forwarded NICs, read-only

	ctx    context.Context // cancelled by Close: ends handlers' dials
	cancel context.CancelFunc

	mu       sync.Mutex
	state    int // open, shuttingDown or closed
	flows    map[*flow]struct{}
	udp      map[netip.AddrPort]*UDPFlow // by the peer's socket
	adm      admission                   // of TCP handshakes (handshake.go)
	closers  []func()                    // run by Close (handlers' resources)
	released chan struct{}               // signalled when a flow ends
	hp       *hostPoller                 // parked host sockets of Relay's TCP flows, once one was
	wg       sync.WaitGroup              // every goroutine of ours

	closeOnce sync.Once
}

const (
	open = iota
	shuttingDown
	closed
)

// New starts intercepting st's flows and hands them to h. st must be
// built with stack.Options{Transparent: true} and have its NICs; a nil o means
// the defaults. One Forwarder per stack: a second replaces the first's
// handlers.
func New(st *stack.Stack, h Handler, o *Options) (*Forwarder, error) {
	if h == nil {
		return nil, errors.New("forward: nil Handler")
	}
	if !st.Transparent() {
		return nil, fmt.Errorf("forward: %w", stack.ErrNotTransparent)
	}
	var opts Options
	if o != nil {
		opts = *o
	}
	f := &Forwarder{
		st: st, gs: st.GVisor(), h: h, o: opts.normalized(),
		flows: map[*flow]struct{}{}, udp: map[netip.AddrPort]*UDPFlow{},
		adm:      admission{dsts: map[netip.AddrPort]*dstState{}, srcs: map[netip.Addr]int{}},
		released: make(chan struct{}, 1),
	}
	f.ping, _ = h.(PingHandler)
	nics := f.o.NICs
	info := f.gs.NICInfo()
	if nics == nil {
		for id := range info {
			nics = append(nics, id)
		}
	}
	f.mtus = map[tcpip.NICID]uint32{}
	for _, id := range nics {
		f.mtus[id] = info[id].MTU
	}
	if len(nics) == 0 {
		return nil, errors.New("forward: the stack has no NIC: add NICs before forward.New")
	}
	for _, id := range nics {
		if terr := f.gs.SetPromiscuousMode(id, true); terr != nil {
			return nil, fmt.Errorf("forward: promiscuous mode on NIC %d: %w", id, stack.TranslateError(terr))
		}
		if terr := f.gs.SetSpoofing(id, true); terr != nil {
			return nil, fmt.Errorf("forward: spoofing on NIC %d: %w", id, stack.TranslateError(terr))
		}
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	// gVisor's limit on pending requests drops SYNs silently: admission
	// (handshake.go) applies the limits instead, refusing with resets.
	f.fwd = tcp.NewForwarder(f.gs, 0, unlimited, f.handleTCP)
	for _, p := range []struct {
		num tcpip.TransportProtocolNumber
		h   stack.TransparentHandler
	}{{tcp.ProtocolNumber, f.handleSegment}, {udp.ProtocolNumber, f.handleUDP}, {icmp.ProtocolNumber4, f.handlePing}, {icmp.ProtocolNumber6, f.handlePing}} {
		if err := st.SetTransparentHandler(p.num, p.h); err != nil {
			f.detach()
			return nil, fmt.Errorf("forward: %w", err)
		}
	}
	return f, nil
}

// detach stops the stack handing us packets.
func (f *Forwarder) detach() {
	for _, p := range []tcpip.TransportProtocolNumber{tcp.ProtocolNumber, udp.ProtocolNumber, icmp.ProtocolNumber4, icmp.ProtocolNumber6} {
		f.st.SetTransparentHandler(p, nil)
	}
}

// Stack returns the stack the Forwarder serves.
func (f *Forwarder) Stack() *stack.Stack { return f.st }

// Stats returns the Forwarder's counters.
func (f *Forwarder) Stats() Stats {
	return f.c.snapshot()
}

// refuse counts a refusal.
func (f *Forwarder) refuse(r Reason) { f.c.refused[r].Add(1) }

// begin registers a goroutine of ours, or reports that no new work may
// start.
func (f *Forwarder) begin() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != open {
		return false
	}
	f.wg.Add(1)
	return true
}

// atClose registers fn to run in Close, before it waits for the
// goroutines (a handler's sockets whose loops must end). If the Forwarder
// is already closing, fn runs now.
func (f *Forwarder) atClose(fn func()) {
	f.mu.Lock()
	if f.state != closed {
		f.closers = append(f.closers, fn)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	fn()
}

// Protocol is a flow's transport protocol.
type Protocol string

// The protocols of flows.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// flow is one open flow's bookkeeping: limits, budget, counters.
type flow struct {
	f        *Forwarder
	proto    Protocol
	src, dst netip.AddrPort // guarded by f.mu (a dialed flow learns src)
	opened   time.Time
	cost     int64
	rx, tx   atomic.Uint64 // bytes from and to the stack's peer

	// Guarded by f.mu.
	ep    tcpip.Endpoint // TCP once accepted
	abort func()         // ends the flow at Close; nil while pending

	once sync.Once
}

// openLocked reserves a flow against the limits and the budget, or says
// which one stood in the way.
func (f *Forwarder) openLocked(p Protocol, src, dst netip.AddrPort) (*flow, Reason, bool) {
	if f.state != open {
		return nil, Closing, false
	}
	if n := f.c.tcpFlows.Load() + f.c.udpFlows.Load(); n >= int64(f.o.MaxFlows) {
		return nil, FlowLimit, false
	}
	count, max, r, cost := &f.c.tcpFlows, f.o.MaxTCP, TCPLimit, f.tcpCost()
	if p == UDP {
		count, max, r, cost = &f.c.udpFlows, f.o.MaxUDP, UDPLimit, int64(f.o.UDPQueue)
	}
	if count.Load() >= int64(max) {
		return nil, r, false
	}
	if f.c.mem.Load()+cost > f.o.MemoryBudget {
		return nil, Budget, false
	}
	count.Add(1)
	f.c.mem.Add(cost)
	fl := &flow{f: f, proto: p, src: src, dst: dst, opened: time.Now(), cost: cost}
	f.flows[fl] = struct{}{}
	if p == UDP {
		f.c.udpOpened.Add(1) // TCP counts once established (newConn)
	}
	return fl, 0, true
}

func (f *Forwarder) open(p Protocol, src, dst netip.AddrPort) (*flow, Reason, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.openLocked(p, src, dst)
}

// tcpCost is what a TCP flow reserves: its send and receive buffers at
// their largest.
func (f *Forwarder) tcpCost() int64 {
	if f.o.TCPBuffer > 0 {
		return 2 * int64(f.o.TCPBuffer)
	}
	var rcv tcpip.TCPReceiveBufferSizeRangeOption
	f.gs.TransportProtocolOption(tcp.ProtocolNumber, &rcv)
	return int64(f.gs.TCPSendBufferLimits().Max) + int64(rcv.Max)
}

// release ends the flow's reservation; idempotent.
func (fl *flow) release() {
	fl.once.Do(func() {
		f := fl.f
		f.mu.Lock()
		delete(f.flows, fl)
		f.mu.Unlock()
		if fl.proto == TCP {
			f.c.tcpFlows.Add(-1)
		} else {
			f.c.udpFlows.Add(-1)
		}
		f.c.mem.Add(-fl.cost)
		select {
		case f.released <- struct{}{}:
		default:
		}
	})
}

// setAbort makes abort end the flow at Close; if Close already ran it
// runs abort now and reports false.
func (fl *flow) setAbort(ep tcpip.Endpoint, abort func()) bool {
	f := fl.f
	f.mu.Lock()
	if f.state == closed {
		f.mu.Unlock()
		abort()
		return false
	}
	if ep != nil {
		fl.ep = ep
	}
	fl.abort = abort
	f.mu.Unlock()
	return true
}

// setSrc records a dialed flow's source once it is known.
func (fl *flow) setSrc(src netip.AddrPort) {
	fl.f.mu.Lock()
	fl.src = src
	fl.f.mu.Unlock()
}

// FlowInfo describes one open flow.
type FlowInfo struct {
	Protocol Protocol
	// Src is the side that opened the flow, Dst where it was going (for
	// a forwarded flow, the original destination).
	Src, Dst netip.AddrPort
	Opened   time.Time
	// BytesUp were received from the stack's peer, BytesDown sent to it.
	BytesUp, BytesDown uint64
	// TCP only: the connection's state ("" until accepted), smoothed RTT
	// and congestion window in segments, as gVisor reports them.
	State string
	RTT   time.Duration
	Cwnd  uint32
}

// Flows yields a snapshot of the open flows, in no particular order.
func (f *Forwarder) Flows() iter.Seq[FlowInfo] {
	return func(yield func(FlowInfo) bool) {
		type snap struct {
			fl       *flow
			src, dst netip.AddrPort
			ep       tcpip.Endpoint
		}
		f.mu.Lock()
		all := make([]snap, 0, len(f.flows))
		for fl := range f.flows {
			all = append(all, snap{fl, fl.src, fl.dst, fl.ep})
		}
		f.mu.Unlock()
		for _, s := range all {
			fl := s.fl
			fi := FlowInfo{Protocol: fl.proto, Src: s.src, Dst: s.dst, Opened: fl.opened, BytesUp: fl.rx.Load(), BytesDown: fl.tx.Load()}
			if s.ep != nil {
				var info tcpip.TCPInfoOption
				if err := s.ep.GetSockOpt(&info); err == nil {
					fi.State, fi.RTT, fi.Cwnd = tcp.EndpointState(info.State).String(), info.RTT, info.SndCwnd
				}
			}
			if !yield(fi) {
				return
			}
		}
	}
}

// Shutdown refuses new flows (counted as Closing), lets open ones finish
// until ctx ends, then closes the rest as Close does. It returns ctx's
// error if flows had to be closed, and waits for every goroutine either
// way.
func (f *Forwarder) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	if f.state == open {
		f.state = shuttingDown
	}
	f.mu.Unlock()
	var err error
	for {
		f.mu.Lock()
		n := len(f.flows)
		f.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-f.released:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		}
		break
	}
	f.Close()
	return err
}

// Close stops intercepting, aborts every open flow (TCP peers get
// resets), cancels the handlers' contexts and waits for every goroutine
// of the Forwarder and its handlers. Idempotent.
func (f *Forwarder) Close() error {
	f.closeOnce.Do(func() {
		f.detach()
		f.mu.Lock()
		f.state = closed
		var aborts []func()
		for fl := range f.flows {
			if fl.abort != nil {
				aborts = append(aborts, fl.abort)
			}
		}
		closers := f.closers
		f.closers = nil
		f.mu.Unlock()
		f.cancel()
		for _, a := range aborts {
			a()
		}
		for _, c := range closers {
			c()
		}
		f.wg.Wait()
		// Flows a handler left open (a conn it never closed).
		f.mu.Lock()
		left := make([]*flow, 0, len(f.flows))
		for fl := range f.flows {
			left = append(left, fl)
		}
		f.mu.Unlock()
		for _, fl := range left {
			fl.release()
		}
	})
	return nil
}

// addrOf converts a gVisor address.
func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}
