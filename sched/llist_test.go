package sched

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// orderLink records the (flow, seq) of every packet it is handed, in order.
type orderLink struct {
	mu  sync.Mutex
	got [][2]uint32
}

func (l *orderLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pkts.AsSlice() {
		f, s := flowOf(p)
		l.got = append(l.got, [2]uint32{f, s})
	}
	return pkts.Len(), nil
}

// testNodes is a node source the test owns in place of nodePool: put
// checks that no node is recycled twice, get hands out the most recently
// recycled node first (what makes a recycled head come back at once).
type testNodes struct {
	mu   sync.Mutex
	free []*node
	t    *testing.T
}

func (f *testNodes) get() *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := len(f.free); k > 0 {
		n := f.free[k-1]
		f.free = f.free[:k-1]
		return n
	}
	return new(node)
}

func (f *testNodes) put(n *node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.free {
		if m == n {
			f.t.Errorf("node %p recycled twice", n)
		}
	}
	f.free = append(f.free, n)
}

// TestLListABA forces the ABA interleaving on llist's push: pusher P
// loads the head A; before its CAS, A's leader L detaches and recycles A,
// and pusher Q takes A from the free list and pushes it onto the empty
// list, so that the head is A again. P's CAS then succeeds. The list must
// stay whole: every packet sent once, none lost, in the order of the
// pushes' CASes (L's, then Q's, then P's). See nodePool for why.
func TestLListABA(t *testing.T) {
	link := &orderLink{}
	q := newOurs(t, LList, link, &Options{Limit: 16})
	nodes := &testNodes{t: t}
	write := func(flow uint32) tcpip.Error {
		pkt := flowPacket(flow, 0)
		defer pkt.DecRef()
		return q.WritePacket(pkt)
	}

	var (
		a      *node // L's node: the head P loads
		lDone  = make(chan tcpip.Error)
		qDone  = make(chan tcpip.Error)
		forced bool
	)
	q.llHooks = &llistHooks{get: nodes.get, put: nodes.put}
	q.llHooks.beforeCAS = func(old *node) {
		if forced || old == nil || old != a {
			return // L's and Q's pushes onto the empty list: no interference
		}
		forced = true
		// In P, between its load of A and its CAS. Let L lead: it detaches
		// [A], sends flow 1 and recycles A.
		q.root.mu.Unlock()
		require.Nil(t, <-lDone)
		require.Nil(t, q.deferred.Load(), "L detached the whole list")
		// Q takes A again and pushes it onto the empty list; it leads, but
		// waits for the root lock until P's CAS is done.
		q.root.mu.Lock()
		go func() { qDone <- write(2) }()
		for q.deferred.Load() != a {
			runtime.Gosched() // Q pushes without the root lock
		}
	}

	// L pushes flow 1 onto the empty list and leads, held at the root lock.
	q.root.mu.Lock()
	go func() { lDone <- write(1) }()
	for a == nil {
		runtime.Gosched() // L pushes without the root lock, then waits for it
		a = q.deferred.Load()
	}
	// P pushes flow 3; the hook forces the interleaving before its CAS.
	require.Nil(t, write(3), "P's push lands on the recycled head; it is not the leader")
	require.True(t, forced, "the interleaving happened")
	require.Zero(t, q.casRetries.Load(), "P's CAS against the stale load of A succeeded: the ABA case, not a retry")
	q.root.mu.Unlock()
	require.Nil(t, <-qDone)

	require.Eventually(t, func() bool {
		s := q.QdiscStats()
		return s.Sent == 3 && s.Backlog == 0
	}, 10*time.Second, time.Millisecond)
	link.mu.Lock()
	got := link.got
	link.mu.Unlock()
	require.Equal(t, [][2]uint32{{1, 0}, {2, 0}, {3, 0}}, got, "each packet once, in CAS order")
	s := q.QdiscStats()
	require.Equal(t, s.Offered, s.Enqueued+s.Refused.Total())
	require.Equal(t, s.Enqueued, s.Sent+s.Dropped.Total())
	require.Len(t, nodes.free, 2, "A and P's node are back on the free list, once each")
	q.Close()
}
