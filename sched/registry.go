package sched

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Names of the baseline disciplines.
const (
	// None is gVisor's default: no queue, every packet goes straight to the
	// link in the sender's goroutine.
	None = "none"
	// FIFO is gVisor's asynchronous qdisc/fifo, configured as runsc does.
	FIFO = "fifo"
)

// DefaultLimit is the queue length in packets when Options.Limit is zero.
// 1000 is Linux's default txqueuelen and the length runsc gives gVisor's
// fifo, so that queue depth is never the difference between two disciplines.
const DefaultLimit = 1000

// Options tunes a discipline. The zero value (or a nil *Options) asks for
// the defaults; a discipline ignores what does not apply to it.
type Options struct {
	// Limit is the queue length in packets; 0 means DefaultLimit.
	Limit int
	// Queues is the number of independent queues for disciplines that have
	// several (fifo: one dispatcher goroutine each); 0 means GOMAXPROCS,
	// which is what runsc passes to gVisor's fifo.
	Queues int
	// Quota is how many packets one run sends before handing the rest to
	// the background goroutine; 0 means DefaultQuota.
	Quota int
	// Batch is the most packets per WritePackets call; 0 means
	// DefaultBatch. It never exceeds Quota.
	Batch int
	// MaxBurst caps llist's deferred list; 0 means DefaultMaxBurst.
	MaxBurst int
	// RetryInterval is how long to wait before retrying a full link that
	// cannot signal writability; 0 means DefaultRetryInterval.
	RetryInterval time.Duration
	// NoProfile turns off the contention profile and the WritePacket
	// latency histogram (on by default; the counters stay on).
	NoProfile bool
	// HandOff makes our disciplines send even a packet that finds the
	// queue idle from their background goroutine: the writer queues it,
	// wakes the goroutine and returns, instead of writing to the link
	// itself (bypass, as Linux does and the default). It spends a
	// goroutine wake-up per idle period to take the link's system call
	// off the writer, which pays where the writer is a stack's TCP
	// processor with the next segments to handle and another core is
	// free: on two cores, ustack bench's tcp_rr over veth and a single
	// bulk sender gain (see docs/results.md). Counted in Stats.HandedOff.
	// gVisor's disciplines (none, fifo) ignore it.
	HandOff bool
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Limit <= 0 {
		r.Limit = DefaultLimit
	}
	if r.Queues <= 0 {
		r.Queues = runtime.GOMAXPROCS(0)
	}
	if r.Quota <= 0 {
		r.Quota = DefaultQuota
	}
	if r.Batch <= 0 {
		r.Batch = DefaultBatch
	}
	if r.MaxBurst <= 0 {
		r.MaxBurst = DefaultMaxBurst
	}
	if r.RetryInterval <= 0 {
		r.RetryInterval = DefaultRetryInterval
	}
	return r
}

// factory builds one discipline that writes to lower.
type factory func(lower stack.LinkWriter, opts Options) (stack.QueueingDiscipline, error)

type entry struct {
	name, about string
	build       factory
}

// registry lists the disciplines in the order Names reports them: the
// baselines first, so that tables put them in the first rows.
var registry = []entry{
	{None, "gVisor's default: no queue, straight to the link in the sender's goroutine", newPassthrough},
	{FIFO, "gVisor's qdisc/fifo as runsc configures it: GOMAXPROCS queues, a dispatcher goroutine each", newFIFO},
	{RootLock, "ours: every enqueuer and the dequeuer on one root lock (Linux before 2010)", strategyFactory(rootLock)},
	{BusyLock, "ours: enqueuers that find the qdisc running queue on a second lock first (Linux's busylock)", strategyFactory(busyLock)},
	{EnqLock, "ours: enqueuers take an enqueue lock, the dequeuer only the root lock (2010 netdev RFC)", strategyFactory(enqLock)},
	{LList, "ours: lock-free list; the first enqueuer takes the root lock for all (2025 netdev series)", strategyFactory(lList)},
}

func strategyFactory(s strategy) factory {
	return func(lower stack.LinkWriter, opts Options) (stack.QueueingDiscipline, error) {
		q, err := newQdisc(s, lower, opts)
		if err != nil {
			return nil, err
		}
		return q, nil
	}
}

// Names returns the registered discipline names, baselines first.
func Names() []string {
	names := make([]string, len(registry))
	for i, e := range registry {
		names[i] = e.name
	}
	return names
}

// Describe returns a one-line description of the named discipline, or ""
// if the name is not registered.
func Describe(name string) string {
	for _, e := range registry {
		if e.name == name {
			return e.about
		}
	}
	return ""
}

// Known reports whether name is a registered discipline.
func Known(name string) bool { return Describe(name) != "" }

// UnknownError is returned for a discipline name that is not registered.
type UnknownError struct{ Name string }

func (e *UnknownError) Error() string {
	return fmt.Sprintf("unknown qdisc %q: valid names are %s", e.Name, strings.Join(Names(), ", "))
}

// New builds the named discipline on top of lower. The caller owns the
// result and must Close it (a stack NIC does so when it is removed).
//
// For None, New returns a discipline that behaves exactly as gVisor's
// built-in default; a NIC created by package stack with None uses gVisor's
// own default instead, so the baseline is gVisor's code, not a copy of it.
func New(name string, lower stack.LinkWriter, opts *Options) (stack.QueueingDiscipline, error) {
	if lower == nil {
		return nil, fmt.Errorf("qdisc %s: nil link writer", name)
	}
	for _, e := range registry {
		if e.name == name {
			return e.build(lower, opts.withDefaults())
		}
	}
	return nil, &UnknownError{Name: name}
}

func newFIFO(lower stack.LinkWriter, opts Options) (stack.QueueingDiscipline, error) {
	return fifo.New(lower, opts.Queues, opts.Limit), nil
}

// passthrough is gVisor's default discipline: one packet, one WritePackets
// call, in the caller's goroutine.
type passthrough struct{ lower stack.LinkWriter }

var _ stack.QueueingDiscipline = (*passthrough)(nil)

func newPassthrough(lower stack.LinkWriter, _ Options) (stack.QueueingDiscipline, error) {
	return &passthrough{lower: lower}, nil
}

// WritePacket hands pkt to the link at once. The caller keeps its
// reference to pkt.
func (p *passthrough) WritePacket(pkt *stack.PacketBuffer) tcpip.Error {
	var l stack.PacketBufferList
	l.PushBack(pkt)
	_, err := p.lower.WritePackets(l)
	return err
}

// Close does nothing: there is no queue and no goroutine.
func (*passthrough) Close() {}
