package impair

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

var (
	_ stack.LinkEndpoint     = (*Endpoint)(nil)
	_ stack.GSOEndpoint      = (*Endpoint)(nil)
	_ link.Reporter          = (*Endpoint)(nil)
	_ link.Coalescer         = (*Endpoint)(nil)
	_ link.CacheReporter     = (*Endpoint)(nil)
	_ link.ErrReporter       = (*Endpoint)(nil)
	_ poll.Source            = (*Endpoint)(nil)
	_ sched.WritableNotifier = (*Endpoint)(nil)
	_ sched.RoundNotifier    = (*Endpoint)(nil)
)

// Options says what to inject in each direction.
type Options struct {
	// RX impairs packets the endpoint receives.
	RX link.Impairments
	// TX impairs packets the endpoint sends; Corrupt must be 0.
	TX link.Impairments
}

// OnReceive returns the Options that impair what one end of a two-ended
// link (a mem pair, say) receives, so that wrapping both ends gives each
// direction of the wire im's faults, as netem on both ends of a veth does.
// End 0 draws from im.Seed and end 1 from im.Seed+1, so the two directions
// do not draw the same sequence.
func OnReceive(im link.Impairments, end int) *Options {
	im.Seed += uint64(end)
	return &Options{RX: im}
}

// BothWays returns the Options that impair both directions at one
// endpoint (a device whose far end is the kernel's): im on what it
// receives, and im without corruption, which applies to received packets
// only, on what it sends. The directions draw different sequences.
func BothWays(im link.Impairments) *Options {
	tx := im
	tx.Corrupt = 0
	return &Options{RX: im, TX: tx}
}

// Endpoint is an impairing wrapper around a link endpoint. It is safe for
// concurrent use; its delay goroutine starts in Wrap and is joined by
// Close.
//
// It is transparent (STYLE rule 17): through the embedded
// linkutil.Passthrough it implements every optional interface link/doc.go
// lists and passes each through to the wrapped endpoint, LinkStats with
// the impairment counters added. Where the wrapped endpoint lacks one, the
// method reports what such an endpoint would (no GSO, no busy-poll rounds,
// zero counters, no error), and writability is signalled from a timer,
// sched.DefaultRetryInterval after a refused write, so a qdisc never waits
// for a signal that cannot come. A busy-polled round of the wrapped
// endpoint delivers through the receive faults as any other. Its receive
// rounds (sched.RoundNotifier) deliver through the wrapper too; packets
// the wrapper delays arrive later from its delay line, outside any round,
// and their replies leave as ordinary writes.
type Endpoint struct {
	stack.LinkEndpoint
	linkutil.Passthrough
	opts Options

	rxMu, txMu  sync.Mutex // guard the random sources, held packets and due times
	rxRand      *rand.Rand
	txRand      *rand.Rand
	rxHeld      *stack.PacketBuffer // a received packet held for reordering
	rxHeldProto tcpip.NetworkProtocolNumber
	txHeld      *stack.PacketBuffer // a sent packet held for reordering
	// rxLastDue and txLastDue are the latest due time handed to the delay
	// line in each direction: a later packet is never due earlier, so
	// jitter never reorders.
	rxLastDue, txLastDue time.Time
	rxOffload            bool
	delays               *delayLine
	rx, tx               counts

	life linkutil.Lifecycle
}

// Wrap returns lower wrapped with the given impairments; nil opts means
// none (a transparent wrapper, whose faults are all zero). The wrapper
// owns lower: closing the wrapper closes it.
func Wrap(lower stack.LinkEndpoint, o *Options) (*Endpoint, error) {
	if lower == nil {
		return nil, errors.New("impair: nil link endpoint: open the link before wrapping it")
	}
	var opts Options
	if o != nil {
		opts = *o
	}
	if err := opts.RX.Validate(); err != nil {
		return nil, err
	}
	if err := opts.TX.Validate(); err != nil {
		return nil, err
	}
	if opts.TX.Corrupt > 0 {
		return nil, errors.New("impair: corruption applies to received packets only (TX corrupt must be 0)")
	}
	e := &Endpoint{
		LinkEndpoint: lower,
		Passthrough:  linkutil.NewPassthrough(lower),
		opts:         opts,
		rxRand:       rand.New(rand.NewPCG(opts.RX.Seed, 1)),
		txRand:       rand.New(rand.NewPCG(opts.TX.Seed, 2)),
		rxOffload:    lower.Capabilities()&stack.CapabilityRXChecksumOffload != 0,
	}
	e.delays = newDelayLine(e)
	return e, nil
}

// Unwrap returns the wrapped endpoint, for its own methods (queue
// counters, names). The wrapper still owns it.
func (e *Endpoint) Unwrap() stack.LinkEndpoint { return e.LinkEndpoint }

// Attach implements stack.LinkEndpoint: the wrapped endpoint delivers to
// the wrapper, which delivers what survives to d.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.life.AttachAndStart(d, func() {})
	if d == nil {
		e.LinkEndpoint.Attach(nil)
		return
	}
	e.LinkEndpoint.Attach(rxTap{e})
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool { return e.life.IsAttached() }

func (e *Endpoint) upper() stack.NetworkDispatcher { return e.life.Dispatcher() }

// SetOnCloseAction implements stack.LinkEndpoint. The action belongs to
// the wrapper (the NIC holds the wrapper, not the wrapped endpoint).
func (e *Endpoint) SetOnCloseAction(f func()) { e.life.SetOnCloseAction(f) }

// Close runs the on-close action (which removes the NIC), closes the
// wrapped endpoint, stops the delay goroutine and the writability timer,
// and releases every packet held back or delayed, counting them in
// Drops.Closed. Idempotent.
func (e *Endpoint) Close() {
	if first, _ := e.life.BeginClose(); !first {
		return
	}
	e.LinkEndpoint.Close()
	e.delays.close()
	linkutil.StopPassthrough(&e.Passthrough)
	e.rxMu.Lock()
	if e.rxHeld != nil {
		e.rxHeld.DecRef()
		e.rxHeld = nil
		e.rx.closed.Add(1)
	}
	e.rxMu.Unlock()
	e.txMu.Lock()
	if e.txHeld != nil {
		e.txHeld.DecRef()
		e.txHeld = nil
		e.tx.closed.Add(1)
	}
	e.txMu.Unlock()
}
