// Package sched owns ustack's queueing disciplines: the registry that
// builds a stack.QueueingDiscipline by name for a NIC, and the disciplines
// themselves.
//
// Two names are baselines that are not ours and are kept so that every
// measurement of ours has something to be measured against:
//
//   - "none": gVisor's default. The NIC hands each packet straight to the
//     link endpoint's WritePackets, in the sender's goroutine, with no queue.
//   - "fifo": gVisor's qdisc/fifo, configured as runsc configures it
//     (GOMAXPROCS queues of 1000 packets): packets are queued and a
//     dispatcher goroutine per queue writes them to the link, discarding
//     what the link refuses.
//
// Ours run the way Linux runs its qdiscs: synchronously, in the sending
// goroutine, with one owner dequeuing for everybody. They share one core
// (Qdisc): a bounded FIFO; a running token under the root lock; bypass
// when the queue is empty and nobody runs; a run loop that dequeues a
// batch, releases the root lock, calls WritePackets and repeats until the
// queue is empty or the quota is spent, then hands the rest to a
// background goroutine (Linux's TX softirq); requeue at the head of what
// the link refused, resumed on the link's writability signal
// (WritableNotifier) or a timer; a full queue that refuses at once, never
// parking its caller, with a signal for writers that can wait for room
// (RoomNotifier, which package stack's UDP sockets use); one flush per
// receive round for links that say when a round begins and ends
// (RoundNotifier, Linux's xmit_more: what a round's delivery writes leaves
// in one batch at its end); and counters plus a contention profile cheap
// enough to leave on (Stats). They differ only in admission, each
// from a netdev result: "rootlock" (everyone on the root lock, before
// 2010), "busylock" (a second lock for enqueuers that find the qdisc
// running), "enqlock" (a dedicated enqueue lock), and "llist" (a lock-free
// list whose first pusher takes the root lock for all).
//
// sched imports nothing else of ustack's, so that it can be used with any
// gVisor link endpoint.
package sched
