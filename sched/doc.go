// Package sched owns ustack's queueing disciplines: the registry that builds
// a stack.QueueingDiscipline by name for a NIC, and the disciplines
// themselves.
//
// Two names are baselines that are not ours and are kept so that every
// measurement of ours has something to be measured against:
//
//   - "none": gVisor's default. The NIC hands each packet straight to the
//     link endpoint's WritePackets, in the sender's goroutine, with no queue.
//   - "fifo": gVisor's qdisc/fifo, configured as runsc configures it
//     (GOMAXPROCS queues of 1000 packets): packets are queued and a
//     dispatcher goroutine per queue writes them to the link.
//
// sched imports nothing else of ustack's, so that it can be used with any
// gVisor link endpoint.
package sched
