package sched

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Names of our disciplines. They share one core (queue, run loop, bypass,
// quota, requeue, stats) and differ only in admission: who waits on which
// lock before a packet is in the queue.
const (
	// RootLock: every enqueuer and the dequeuer contend on the root lock,
	// as Linux did before 2010. The reference the others are measured
	// against.
	RootLock = "rootlock"
	// BusyLock: an enqueuer that finds the qdisc running first takes a
	// second lock, so the dequeuer competes with at most one enqueuer for
	// the root lock (Linux's qdisc busylock, 2010).
	BusyLock = "busylock"
	// EnqLock: every enqueuer takes a dedicated enqueue lock before the root
	// lock; the dequeuer takes only the root lock (the 2010 netdev RFC:
	// 200 Kpps to 1.07 Mpps).
	EnqLock = "enqlock"
	// LList: enqueuers push onto a lock-free list with one compare-and-swap;
	// the one that found it empty takes the root lock for all of them (the
	// 2025 netdev series: 16 to 29 Mpps at half the cycles).
	LList = "llist"
)

const (
	// DefaultQuota is how many packets one run may send before it hands the
	// rest to the background goroutine: 64 is Linux's dev_tx_weight
	// (net.core.dev_weight), the budget of one __qdisc_run.
	DefaultQuota = 64
	// DefaultBatch is the most packets one WritePackets call carries. Linux
	// bulk-dequeues as many as BQL allows within the quota; with no byte
	// budget here, the quota bounds it.
	DefaultBatch = DefaultQuota
	// DefaultMaxBurst caps llist's deferred list, like Linux's
	// net.core.qdisc_max_burst (1000).
	DefaultMaxBurst = 1000
	// DefaultRetryInterval is how long a discipline waits before retrying a
	// full link that cannot signal writability: about one syscall-bound
	// device's time to drain a batch.
	DefaultRetryInterval = 50 * time.Microsecond
)

// WritableNotifier is implemented by links that can say when a write that
// they refused for lack of room may succeed again. A discipline registers
// once; the link then calls f, from any goroutine and without holding its
// own locks, at least once after each refusal, when it has freed room.
// The mem, tun and afpacket endpoints implement it, and impair passes it
// through; a link that does not is retried every Options.RetryInterval.
type WritableNotifier interface {
	NotifyWritable(f func())
}

// RoundNotifier is implemented by links that deliver what they receive
// in rounds (one batch of reads), so that a discipline can flush what the
// round's delivery produced (ACKs, replies, forwarded packets) once, at
// the end of the round, rather than once per packet: Linux's xmit_more,
// the bulk queue of an RX round (DESIGN: "Bulk transmit"). A discipline
// registers once; the link then calls begin in the delivering goroutine
// before it delivers a round's first packet, and end in the same goroutine
// after the round's last one, always, whatever the round's outcome. A
// link calls neither for a round that found nothing, so an idle link costs
// nothing.
//
// Between begin and end the discipline holds its running token for the
// round when nobody else runs it: what is written meanwhile, from any
// goroutine, queues instead of leaving at once, and end sends it in
// batches. A round never waits to fill a batch: the queue is flushed at
// the round's end, or as soon as it holds a batch, whichever comes first.
type RoundNotifier interface {
	NotifyRounds(begin, end func())
}

// RoomNotifier is implemented by disciplines that can say when a full
// queue has room again: every one of ours. A discipline never waits for
// room itself (a full queue refuses at once, counted); a writer that may
// wait, as a blocking socket waits for send buffer, waits on Room before
// it writes or after a refusal, and then (re)tries.
type RoomNotifier interface {
	// Room returns a channel closed once the queue has room for writers
	// that wait, or the discipline is closed; closed already if there is
	// room now. It is safe for concurrent use and cheap when there is room.
	Room() <-chan struct{}
}

// Reporter is implemented by disciplines that keep Stats: every one of
// ours, not gVisor's none and fifo.
type Reporter interface {
	QdiscStats() Stats
}

type strategy int

const (
	rootLock strategy = iota
	busyLock
	enqLock
	lList
)

var strategyNames = [...]string{RootLock, BusyLock, EnqLock, LList}

var (
	_ stack.QueueingDiscipline = (*Qdisc)(nil)
	_ Reporter                 = (*Qdisc)(nil)
	_ RoomNotifier             = (*Qdisc)(nil)
)

// Qdisc is a Linux-style queueing discipline: run in the sender's
// goroutine, with one owner dequeuing for everybody. It is safe for
// concurrent use; its background goroutine (Linux's TX softirq) starts in
// New and is joined by Close.
//
// The running token is a flag under the root lock: whoever sets it sends
// for everybody until the queue is empty, and the check for more work and
// the release of the token happen in one critical section, so a packet
// enqueued while the runner is about to stop is never stranded.
type Qdisc struct {
	strat    strategy
	lower    stack.LinkWriter
	limit    int
	quota    int
	batchMax int
	maxBurst int
	retry    time.Duration
	profile  bool
	notifies bool
	handOff  bool

	root profLock // guards everything down to the next blank line
	idle sync.Cond
	fifo pktRing
	// running: a goroutine owns the token, or it is parked for the
	// background goroutine (parked), possibly until the link has room
	// (waitLink), or a link's receive round holds it until the round ends
	// (inRound, see RoundNotifier). Invariant: !running implies an empty
	// queue.
	running, parked, waitLink, closed bool
	inRound                           bool
	closeWaits                        bool // Close waits on idle for the runner
	offered, enqueued, bypassed       uint64
	sent, bytes, batches, requeued    uint64
	refused, dropped                  Drops
	handoffs, linkFull, retries       uint64
	handedOff                         uint64
	rounds, roundFlushes              uint64
	blocked                           uint64 // waits registered by Room
	llScratch                         []*node
	// room is closed, and forgotten, when a full queue frees room while
	// writers wait on it (roomWaiters, registered by Room).
	room        chan struct{}
	roomWaiters int

	// runningHint mirrors running for busylock's unlocked check, as Linux's
	// qdisc_is_running reads without the lock.
	runningHint atomic.Bool
	busy        profLock // busylock's second lock; taken before root
	enq         profLock // enqlock's enqueue lock; taken before root

	deferred     atomic.Pointer[node] // llist's list, newest first
	casRetries   atomic.Uint64
	burstRefused atomic.Uint64
	overRefused  atomic.Uint64 // llist pushes refused for a full queue
	// backlogHint mirrors the queue length for those who do not take the
	// root lock (llist's pushers, Room's first look): written under it
	// whenever the queue changes.
	backlogHint atomic.Int32

	// The runner's scratch: only the token holder touches them.
	batch   stack.PacketBufferList
	requeue []*stack.PacketBuffer

	writable atomic.Uint64 // writability signals received
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closeMu  sync.Mutex // serializes Close

	lat latency

	// hookBeforeRecheck, when set by a test, runs in the runner after a
	// batch is written and before it takes the root lock to look for more.
	hookBeforeRecheck func()
	// llHooks, when set by a test, force llist interleavings (llist.go).
	llHooks *llistHooks
}

// WritePacket implements stack.QueueingDiscipline. The caller keeps its
// reference to pkt; the discipline takes its own for as long as it holds
// the packet. A nil error means the packet was accepted: it will be sent,
// or dropped and counted in Stats.Dropped.
func (q *Qdisc) WritePacket(pkt *stack.PacketBuffer) tcpip.Error {
	if !q.profile || rand.Uint32()%latencySampleEvery != 0 {
		return q.admit(pkt)
	}
	start := time.Now()
	err := q.admit(pkt)
	q.lat.record(time.Since(start))
	return err
}

// latencySampleEvery: the latency histogram times one WritePacket call in
// this many, picked at random. Reading the clock costs about 54 ns on this
// project's VMs (kvm-clock), two reads a call would cost more than the
// admission they measure; sampled, the profile costs a few ns per packet.
const latencySampleEvery = 16

// QdiscStats implements Reporter.
func (q *Qdisc) QdiscStats() Stats {
	var locks []LockStats
	// Lock order is busy or enqueue before root, as in admission.
	switch q.strat {
	case busyLock:
		locks = append(locks, q.busy.stats())
	case enqLock:
		locks = append(locks, q.enq.stats())
	}
	burst, over := q.burstRefused.Load(), q.overRefused.Load()
	q.root.mu.Lock()
	s := Stats{
		Strategy:      strategyNames[q.strat],
		Offered:       q.offered + burst + over,
		Enqueued:      q.enqueued,
		Bypassed:      q.bypassed,
		Sent:          q.sent,
		Bytes:         q.bytes,
		Batches:       q.batches,
		Requeued:      q.requeued,
		Refused:       q.refused,
		Dropped:       q.dropped,
		Backlog:       q.fifo.len(),
		QuotaHandoffs: q.handoffs,
		HandedOff:     q.handedOff,
		Rounds:        q.rounds,
		RoundFlushes:  q.roundFlushes,
		Blocked:       q.blocked,
		LinkFull:      q.linkFull,
		TimerRetries:  q.retries,
	}
	s.Refused.Burst += burst
	s.Refused.Overlimit += over
	root := q.root.statsLocked()
	q.root.mu.Unlock()
	locks = append(locks, root)
	if q.strat == lList {
		locks = append([]LockStats{{Name: "defer_list", Acquisitions: s.Offered, Contended: q.casRetries.Load()}}, locks...)
	}
	s.Locks = locks
	s.WritableWakeups = q.writable.Load()
	s.Latency = q.lat.snapshot()
	return s
}
