package sched

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
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
	// DefaultUDPBlock is how long a UDP writer waits for room in a full
	// queue before it is refused: long enough for the runner to send a few
	// batches on any link we have (a batch leaves in well under a
	// millisecond), short enough that a dead link shows as ENOBUFS soon.
	DefaultUDPBlock = 100 * time.Millisecond
)

// WritableNotifier is implemented by links that can say when a write that
// they refused for lack of room may succeed again. A discipline registers
// once; the link then calls f, from any goroutine and without holding its
// own locks, at least once after each refusal, when it has freed room.
// mem endpoints implement it; links that do not are retried on a timer.
type WritableNotifier interface {
	NotifyWritable(f func())
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
	udpBlock time.Duration // 0: never block
	profile  bool
	notifies bool

	root profLock // guards everything down to the next blank line
	idle sync.Cond
	fifo pktRing
	// running: a goroutine owns the token, or it is parked for the
	// background goroutine (parked), possibly until the link has room
	// (waitLink). Invariant: !running implies an empty queue.
	running, parked, waitLink, closed bool
	closeWaits                        bool // Close waits on idle for the runner
	offered, enqueued, bypassed       uint64
	sent, bytes, batches, requeued    uint64
	refused, dropped                  Drops
	handoffs, linkFull, retries       uint64
	blocked                           uint64 // waits of UDP writers for room
	llScratch                         []*node
	// room is closed, and forgotten, when a full queue frees room while
	// writers wait on it (roomWaiters).
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
	// backlogHint mirrors the queue length for llist's pushers, which do
	// not take the root lock: written once per batch under it.
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
}

// newQdisc builds one of our disciplines.
func newQdisc(strat strategy, lower stack.LinkWriter, o Options) (*Qdisc, error) {
	switch {
	case o.Quota < 1:
		return nil, fmt.Errorf("qdisc %s: quota %d: must be at least 1", strategyNames[strat], o.Quota)
	case o.Batch < 1:
		return nil, fmt.Errorf("qdisc %s: batch %d: must be at least 1", strategyNames[strat], o.Batch)
	case o.MaxBurst < 1:
		return nil, fmt.Errorf("qdisc %s: max burst %d: must be at least 1", strategyNames[strat], o.MaxBurst)
	}
	q := &Qdisc{
		strat:    strat,
		lower:    lower,
		limit:    o.Limit,
		quota:    o.Quota,
		batchMax: min(o.Batch, o.Quota),
		maxBurst: o.MaxBurst,
		retry:    o.RetryInterval,
		udpBlock: max(o.UDPBlock, 0),
		profile:  !o.NoProfile,
		fifo:     newPktRing(o.Limit + min(o.Batch, o.Quota)),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	q.root.name, q.busy.name, q.enq.name = "root", "busylock", "enqueue"
	q.idle.L = &q.root.mu
	if n, ok := lower.(WritableNotifier); ok {
		q.notifies = true
		n.NotifyWritable(q.onWritable)
	}
	go q.txLoop()
	return q, nil
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

func (q *Qdisc) admit(pkt *stack.PacketBuffer) tcpip.Error {
	// A UDP writer is an application goroutine holding no stack lock, so
	// it may wait for room as a blocking socket waits for send buffer,
	// instead of being refused and retrying at once. Nothing else waits:
	// TCP segments, ACKs and control packets come from goroutines that
	// other connections share.
	mayWait := q.udpBlock > 0 && pkt.TransportProtocolNumber == header.UDPProtocolNumber
	var deadline time.Time
	for {
		err, room := q.admitOnce(pkt, mayWait)
		if room == nil {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(q.udpBlock)
		}
		if !q.waitRoom(room, deadline) {
			mayWait = false // one last try, refused if still full
		}
	}
}

// admitOnce runs one admission under the strategy's locks. If the queue is
// full and the packet may wait, it returns the channel that signals room.
func (q *Qdisc) admitOnce(pkt *stack.PacketBuffer, mayWait bool) (tcpip.Error, <-chan struct{}) {
	switch q.strat {
	case busyLock:
		// Only an enqueuer that finds a runner at work queues on the second
		// lock; the runner then meets at most one enqueuer at the root lock.
		contended := q.runningHint.Load()
		if contended {
			q.busy.lock(q.profile)
		}
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		if contended {
			q.busy.unlock()
		}
		if runner {
			q.run(first)
		}
		return err, room
	case enqLock:
		q.enq.lock(q.profile)
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		q.enq.unlock()
		if runner {
			q.run(first)
		}
		return err, room
	case lList:
		return q.admitLList(pkt, mayWait)
	default:
		q.root.lock(q.profile)
		first, runner, err, room := q.admitLocked(pkt, mayWait)
		q.root.unlock()
		if runner {
			q.run(first)
		}
		return err, room
	}
}

// waitRoom waits for room, the deadline or Close, and reports whether room
// came.
func (q *Qdisc) waitRoom(room <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-room:
		return true
	case <-t.C:
		return false
	case <-q.stop:
		return false
	}
}

// roomLocked registers a waiter for room in the queue.
func (q *Qdisc) roomLocked() <-chan struct{} {
	if q.room == nil {
		q.room = make(chan struct{})
	}
	q.roomWaiters++
	q.blocked++
	return q.room
}

// signalRoomLocked wakes the writers waiting for room, if there is some.
func (q *Qdisc) signalRoomLocked() {
	if q.roomWaiters > 0 && (q.closed || q.fifo.len() < q.limit) {
		close(q.room)
		q.room, q.roomWaiters = nil, 0
	}
}

// admitLocked takes one packet under the root lock. It returns runner=true
// if the caller now owns the running token, and first, a reference to pkt,
// if pkt should be sent directly (bypass). If the queue is full and the
// packet may wait, it counts nothing and returns the channel to wait on.
func (q *Qdisc) admitLocked(pkt *stack.PacketBuffer, mayWait bool) (first *stack.PacketBuffer, runner bool, err tcpip.Error, room <-chan struct{}) {
	if mayWait && !q.closed && q.running && q.fifo.len() >= q.limit {
		return nil, false, nil, q.roomLocked()
	}
	q.offered++
	switch {
	case q.closed:
		q.refused.Closed++
		return nil, false, &tcpip.ErrClosedForSend{}, nil
	case !q.running:
		// Nobody runs, so the queue is empty: send directly (Linux's
		// TCQ_F_CAN_BYPASS), taking the token to keep order.
		q.setRunningLocked(true)
		q.enqueued++
		q.bypassed++
		return pkt.IncRef(), true, nil, nil
	case q.fifo.len() >= q.limit:
		q.refused.Overlimit++
		return nil, false, &tcpip.ErrNoBufferSpace{}, nil
	}
	q.fifo.pushBack(pkt.IncRef())
	q.enqueued++
	return nil, false, nil, nil
}

func (q *Qdisc) setRunningLocked(r bool) {
	q.running = r
	q.runningHint.Store(r)
	if !r && q.closeWaits {
		q.idle.Broadcast()
	}
}

// run sends for everybody until the queue is empty, the quota is spent or
// the link is full. The caller owns the running token and does not hold
// the root lock. first, if not nil, is an accepted packet (the discipline
// holding a reference) to send ahead of the queue.
func (q *Qdisc) run(first *stack.PacketBuffer) {
	if first != nil {
		q.batch.PushBack(first)
	} else {
		q.root.lock(q.profile)
		if !q.fillLocked(q.quota) {
			return
		}
		q.root.unlock()
	}
	sent := 0
	for {
		n, full, seq := q.xmit()
		// xmit returns with the root lock held.
		sent += n
		switch {
		case q.closed:
			q.setRunningLocked(false)
			q.root.unlock()
			return
		case full && q.writable.Load() == seq:
			// The link is full and has not signalled room since the write:
			// park the token until it does (or, for links that cannot
			// signal, until a timer fires).
			q.linkFull++
			q.parked, q.waitLink = true, true
			q.root.unlock()
			if !q.notifies {
				q.kickTX()
			}
			return
		case sent >= q.quota && q.fifo.len() > 0:
			// Quota spent: the background goroutine sends the rest, so no
			// caller is held hostage for everybody's traffic.
			q.handoffs++
			q.parked = true
			q.root.unlock()
			q.kickTX()
			return
		}
		budget := q.quota - sent
		if budget <= 0 {
			budget = q.quota
		}
		if !q.fillLocked(budget) {
			return
		}
		q.root.unlock()
	}
}

// fillLocked moves up to budget packets from the queue into the runner's
// batch. If there is nothing to send it releases the token and the root
// lock and returns false; otherwise it returns true with the lock held.
func (q *Qdisc) fillLocked(budget int) bool {
	if q.closed || q.fifo.len() == 0 {
		q.setRunningLocked(false)
		q.root.unlock()
		return false
	}
	k := min(budget, q.batchMax, q.fifo.len())
	for range k {
		q.batch.PushBack(q.fifo.popFront())
	}
	q.backlogHint.Store(int32(q.fifo.len()))
	q.signalRoomLocked()
	return true
}

// xmit writes the runner's batch without the root lock, then takes the
// lock and accounts for the outcome: sent packets are released, packets
// the link refused for lack of room go back to the head of the queue, and
// packets it failed are dropped. It returns how many were sent, whether the
// link was full, and the writability count read before the write.
func (q *Qdisc) xmit() (sent int, full bool, seq uint64) {
	pkts := q.batch.AsSlice()
	bytes := 0
	for _, p := range pkts {
		bytes += p.Size()
	}
	seq = q.writable.Load()
	n, err := q.lower.WritePackets(q.batch)
	n = min(max(n, 0), len(pkts))
	var linkDrops uint64
	q.requeue = q.requeue[:0]
	if n < len(pkts) {
		switch err.(type) {
		case *tcpip.ErrNoBufferSpace, *tcpip.ErrWouldBlock, nil:
			full = true
		case *tcpip.ErrClosedForSend:
			// The link is gone: nothing of this batch will ever leave.
			linkDrops = uint64(len(pkts) - n)
		default:
			// One packet failed; the rest were not tried.
			linkDrops = 1
		}
		for _, p := range pkts[n+int(linkDrops):] {
			q.requeue = append(q.requeue, p.IncRef())
		}
		for _, p := range pkts[n:] {
			bytes -= p.Size()
		}
	}
	// Release the discipline's references to what left or was dropped; the
	// requeued packets keep the ones taken just above.
	q.batch.Reset()
	if q.hookBeforeRecheck != nil {
		q.hookBeforeRecheck()
	}
	q.root.lock(q.profile)
	q.batches++
	q.sent += uint64(n)
	q.bytes += uint64(bytes)
	q.dropped.Link += linkDrops
	if len(q.requeue) > 0 {
		q.fifo.pushFront(q.requeue)
		q.backlogHint.Store(int32(q.fifo.len()))
		q.requeued += uint64(len(q.requeue))
		clear(q.requeue)
		if linkDrops > 0 {
			// Not a full link: retry the rest at once.
			full = false
		}
	}
	return n, full, seq
}

// onWritable is the link's signal that it has room again.
func (q *Qdisc) onWritable() {
	q.writable.Add(1)
	q.kickTX()
}

func (q *Qdisc) kickTX() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// txLoop is the background goroutine, Linux's TX softirq: it picks up a
// parked token, after a quota hand-off, a writability signal, or a timed
// retry of a link that cannot signal.
func (q *Qdisc) txLoop() {
	defer close(q.done)
	var timer *time.Timer
	for {
		select {
		case <-q.kick:
		case <-q.stop:
			return
		}
		q.root.lock(q.profile)
		if !q.parked || q.closed {
			q.root.unlock()
			continue
		}
		if q.waitLink && !q.notifies {
			q.root.unlock()
			if timer == nil {
				timer = time.NewTimer(q.retry)
			} else {
				timer.Reset(q.retry)
			}
			select {
			case <-timer.C:
			case <-q.stop:
				timer.Stop()
				return
			}
			q.root.lock(q.profile)
			if !q.parked || q.closed {
				q.root.unlock()
				continue
			}
			q.retries++
		}
		q.parked, q.waitLink = false, false
		q.root.unlock()
		q.run(nil)
	}
}

// Close implements stack.QueueingDiscipline. It refuses further packets,
// waits for a runner in the middle of a batch, releases every queued packet
// (counted in Dropped.Closed) and joins the background goroutine. It is
// idempotent.
func (q *Qdisc) Close() {
	q.closeMu.Lock()
	defer q.closeMu.Unlock()
	q.root.mu.Lock()
	if q.closed {
		q.root.mu.Unlock()
		return
	}
	q.closed = true
	q.closeWaits = true
	// Writers waiting for room learn at once that none will come.
	q.signalRoomLocked()
	for q.running && !q.parked {
		q.idle.Wait()
	}
	q.setRunningLocked(false)
	q.parked, q.waitLink = false, false
	var release []*stack.PacketBuffer
	for q.fifo.len() > 0 {
		release = append(release, q.fifo.popFront())
	}
	q.dropped.Closed += uint64(len(release))
	q.backlogHint.Store(0)
	q.signalRoomLocked()
	q.root.mu.Unlock()
	for _, p := range release {
		p.DecRef()
	}
	close(q.stop)
	<-q.done
}

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
