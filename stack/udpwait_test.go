package stack_test

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// heldLink is a link whose first write blocks until release is closed:
// the qdisc's runner is stuck in it, so what is written next queues.
type heldLink struct {
	gstack.LinkEndpoint
	once             sync.Once
	started, release chan struct{}
}

func (h *heldLink) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	h.once.Do(func() {
		close(h.started)
		<-h.release
	})
	return h.LinkEndpoint.WritePackets(pkts)
}

// qdiscLimit is the held host's queue length: small, so that a few
// datagrams fill it.
const qdiscLimit = 2

// heldHosts builds a sender whose NIC (qdisc rootlock, qdiscLimit
// packets) is held, and a receiver listening on port 9. Both report
// refusals (UDPRecvErr), so that a refused write would fail.
func heldHosts(t *testing.T, wait time.Duration) (sender net.Conn, receiver net.PacketConn, link *heldLink, qdisc func() sched.Stats) {
	t.Helper()
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	link = &heldLink{LinkEndpoint: a, started: make(chan struct{}), release: make(chan struct{})}
	sa, err := stack.New(&stack.Options{UDPRecvErr: true, UDPWait: wait})
	require.NoError(t, err)
	t.Cleanup(func() { sa.Close() })
	id, err := sa.AddNIC(link, &stack.NICOptions{Qdisc: sched.RootLock, QdiscOptions: &sched.Options{Limit: qdiscLimit}})
	require.NoError(t, err)
	require.NoError(t, sa.AddAddress(id, netip.MustParsePrefix("198.18.7.1/24")))
	sb, err := stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	idb, err := sb.AddNIC(b, nil)
	require.NoError(t, err)
	require.NoError(t, sb.AddAddress(idb, netip.MustParsePrefix("198.18.7.2/24")))

	receiver, err = sb.ListenUDP(netip.MustParseAddrPort("198.18.7.2:9"))
	require.NoError(t, err)
	t.Cleanup(func() { receiver.Close() })
	sender, err = sa.DialUDP(netip.AddrPort{}, netip.MustParseAddrPort("198.18.7.2:9"))
	require.NoError(t, err)
	t.Cleanup(func() { sender.Close() })
	// Cleanups run last first: the link lets go before anything closes
	// (a qdisc's Close waits for its runner).
	t.Cleanup(func() {
		select {
		case <-link.release:
		default:
			close(link.release)
		}
	})
	qdisc = func() sched.Stats {
		s, ok := sa.QdiscStats(id)
		require.True(t, ok)
		return s
	}
	return sender, receiver, link, qdisc
}

// fill holds the runner in the link with datagram 0 and queues 1 to
// qdiscLimit behind it: the queue is then full.
func fill(t *testing.T, sender net.Conn, link *heldLink) {
	t.Helper()
	go sender.Write([]byte{0}) // becomes the runner and is held in the link
	<-link.started
	for i := 1; i <= qdiscLimit; i++ {
		_, err := sender.Write([]byte{byte(i)})
		require.NoError(t, err)
	}
}

// TestUDPWriterWaitsForRoom: a UDP write that the full queue refuses waits
// for the qdisc's room signal and is sent, instead of failing with ENOBUFS;
// the qdisc refused it once, at once. A later write on the same socket
// waits before it writes, while that queue is still full, so the qdisc
// does not refuse it at all.
func TestUDPWriterWaitsForRoom(t *testing.T) {
	sender, receiver, link, qdisc := heldHosts(t, time.Hour)
	fill(t, sender, link)
	done := make(chan error, 2)
	write := func(b byte) { _, err := sender.Write([]byte{b}); done <- err }
	go write(qdiscLimit + 1)
	require.Eventually(t, func() bool { return qdisc().Blocked == 1 }, 10*time.Second, time.Millisecond, "the writer waits on Room")
	go write(qdiscLimit + 2)
	require.Eventually(t, func() bool { return qdisc().Blocked == 2 }, 10*time.Second, time.Millisecond, "the second writer waits too")
	select {
	case err := <-done:
		t.Fatalf("a write returned (%v) while the queue was still full", err)
	default:
	}
	require.Equal(t, uint64(1), qdisc().Refused.Overlimit, "the second writer waited before writing: no refusal")
	close(link.release)
	require.NoError(t, <-done, "sent once the runner made room")
	require.NoError(t, <-done, "sent once the runner made room")

	buf := make([]byte, 16)
	var late []byte
	for i := 0; i <= qdiscLimit+2; i++ {
		n, _, err := receiver.ReadFrom(buf)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		if i <= qdiscLimit {
			require.Equal(t, byte(i), buf[0], "the queued datagrams arrive in order")
		} else {
			late = append(late, buf[0])
		}
	}
	require.ElementsMatch(t, []byte{qdiscLimit + 1, qdiscLimit + 2}, late, "both waiting writers' datagrams arrive, once each")
	require.Equal(t, uint64(1), qdisc().Refused.Overlimit)
}

// TestUDPWaitOff: with the wait off, the refused write fails at once with
// the refusal (ENOBUFS under UDPRecvErr), and nobody waited.
func TestUDPWaitOff(t *testing.T) {
	sender, _, link, qdisc := heldHosts(t, -1)
	fill(t, sender, link)
	_, err := sender.Write([]byte{qdiscLimit + 1})
	require.ErrorContains(t, err, "no buffer space")
	require.Zero(t, qdisc().Blocked)
}

// TestUDPWaitIsBounded: a queue that stays full refuses the waiting
// writer when its wait is over, and so does a write deadline that comes
// first.
func TestUDPWaitIsBounded(t *testing.T) {
	sender, _, link, qdisc := heldHosts(t, time.Millisecond)
	fill(t, sender, link)
	_, err := sender.Write([]byte{qdiscLimit + 1})
	require.ErrorContains(t, err, "no buffer space", "refused after its wait")
	require.Positive(t, qdisc().Blocked)

	sender2, _, link2, _ := heldHosts(t, time.Hour)
	fill(t, sender2, link2)
	require.NoError(t, sender2.SetWriteDeadline(time.Now().Add(time.Millisecond)))
	// The wait is an hour: only the deadline can end it. Depending on
	// which check sees the deadline first, the write fails as a timeout
	// or with the last refusal.
	_, err = sender2.Write([]byte{qdiscLimit + 1})
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout() || strings.Contains(err.Error(), "no buffer space"), "the write deadline ends the wait: %v", err)
}

// TestUDPRecvErrOnlyOnceWritten: a socket that waits for room sets
// IP_RECVERR (how it learns of refusals) at its first write, so that a
// socket that only reads never queues ICMP errors.
func TestUDPRecvErrOnlyOnceWritten(t *testing.T) {
	p := stacktest.New(t, nil)
	srv, err := p.B.ListenUDP(netip.AddrPortFrom(stacktest.B4, 9))
	require.NoError(t, err)
	defer srv.Close()
	ep := stack.EndpointOf(srv.(net.Conn))
	require.NotNil(t, ep)
	require.False(t, ep.SocketOptions().GetIPv4RecvError(), "a socket that has not written")
	_, err = srv.WriteTo([]byte{1}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(stacktest.A4, 9)))
	require.NoError(t, err)
	require.True(t, ep.SocketOptions().GetIPv4RecvError(), "set at the first write")
}
