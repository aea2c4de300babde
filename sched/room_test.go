package sched

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// blockedLink returns a recorder whose first write blocks until release is
// closed, and a channel closed once that write has begun.
func blockedLink() (r *recorder, started, release chan struct{}) {
	r = newRecorder()
	started, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.Take = func(n int) int {
		once.Do(func() {
			close(started)
			<-release
		})
		return n
	}
	return r, started, release
}

// fillBehindStuckRunner starts a runner that the link holds, then fills
// the queue to its limit. It returns when the queue is full.
func fillBehindStuckRunner(t *testing.T, q *Qdisc, limit int, started chan struct{}) {
	t.Helper()
	go func() {
		pkt := flowPacket(0, 0)
		q.WritePacket(pkt)
		pkt.DecRef()
	}()
	<-started
	for i := 1; i <= limit; i++ {
		pkt := flowPacket(0, uint32(i))
		require.Nil(t, q.WritePacket(pkt))
		pkt.DecRef()
	}
}

// TestFullQueueNeverBlocksCaller: with the runner stuck in the link and
// the queue full, every WritePacket, UDP or not, returns at once with
// ErrNoBufferSpace, counted; no caller parks in the qdisc (a forwarding
// stack's receive loop calls it). Were a call to wait for room, it would
// wait for the release below, which comes only after it returned: the test
// would hang.
func TestFullQueueNeverBlocksCaller(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			const limit = 4
			r, started, release := blockedLink()
			q := newOurs(t, name, r, &Options{Limit: limit})
			fillBehindStuckRunner(t, q, limit, started)
			for i, proto := range []tcpip.TransportProtocolNumber{header.UDPProtocolNumber, header.TCPProtocolNumber, header.UDPProtocolNumber} {
				pkt := flowPacket(1, uint32(i))
				pkt.TransportProtocolNumber = proto
				require.IsType(t, &tcpip.ErrNoBufferSpace{}, q.WritePacket(pkt), "a full queue refuses at once")
				pkt.DecRef()
			}
			require.Equal(t, uint64(3), q.QdiscStats().Refused.Overlimit)
			require.Zero(t, q.QdiscStats().Blocked, "nobody waited")
			close(release)
			s := requireConserved(t, q, r)
			require.Equal(t, uint64(limit+1), s.Sent)
			q.Close()
		})
	}
}

// TestRoom: Room is closed at once while there is room; on a full queue it
// is open, counts the wait, and closes when the runner makes room; Close
// closes it too, and after Close it is closed at once.
func TestRoom(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			const limit = 4
			r, started, release := blockedLink()
			q := newOurs(t, name, r, &Options{Limit: limit})
			requireClosed(t, q.Room(), "an idle qdisc has room")

			fillBehindStuckRunner(t, q, limit, started)
			room := q.Room()
			requireOpen(t, room, "a full queue has no room")
			require.Equal(t, uint64(1), q.QdiscStats().Blocked)
			close(release)
			<-room // the runner dequeues a batch: room
			pkt := flowPacket(1, 0)
			require.Nil(t, q.WritePacket(pkt), "accepted once there is room")
			pkt.DecRef()
			requireConserved(t, q, r)
			q.Close()
			requireClosed(t, q.Room(), "a closed qdisc waits for nothing")
		})
	}
}

// TestRoomClosedByClose: a writer waiting for room learns at once from
// Close that none will come.
func TestRoomClosedByClose(t *testing.T) {
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			const limit = 2
			r, started, release := blockedLink()
			q := newOurs(t, name, r, &Options{Limit: limit})
			fillBehindStuckRunner(t, q, limit, started)
			room := q.Room()
			requireOpen(t, room, "full")
			closed := make(chan struct{})
			go func() {
				q.Close() // waits for the stuck runner
				close(closed)
			}()
			<-room // closed by Close before it waits for the runner
			close(release)
			<-closed
		})
	}
}

func requireClosed(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	default:
		t.Fatal(msg + ": Room is not closed")
	}
}

func requireOpen(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
		t.Fatal(msg + ": Room is closed")
	default:
	}
}

var _ RoomNotifier = (*Qdisc)(nil)

// TestRoomNotifierFoundThroughNew: the stack finds Room by a type
// assertion on what New returns.
func TestRoomNotifierFoundThroughNew(t *testing.T) {
	for _, name := range Names() {
		qd, err := New(name, &discard{}, nil)
		require.NoError(t, err)
		_, ok := qd.(RoomNotifier)
		require.Equal(t, name != None && name != FIFO, ok, "%s: ours signal room, gVisor's do not", name)
		qd.Close()
	}
}
