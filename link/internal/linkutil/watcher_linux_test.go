package linkutil

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// watchedPair returns the RawConn of a non-blocking socketpair end whose
// send buffer is full, and the peer's descriptor to drain it from; both
// are closed when the test ends.
func watchedPair(t *testing.T) (syscall.RawConn, *os.File, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.SetNonblock(fds[0], true))
	require.NoError(t, unix.SetNonblock(fds[1], true))
	f := os.NewFile(uintptr(fds[0]), "watched")
	t.Cleanup(func() { f.Close(); unix.Close(fds[1]) })
	rc, err := f.SyscallConn()
	require.NoError(t, err)
	var werr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		for {
			if _, werr = unix.Write(int(fd), make([]byte, 512)); werr != nil {
				return
			}
		}
	}))
	require.ErrorIs(t, werr, unix.EAGAIN, "the send buffer fills")
	return rc, f, fds[1]
}

// TestWatcherSignalsOnceRoomIsMade: a refusal starts the watcher (once,
// through start), which signals only after the peer drained, and a later
// refusal is signalled again without a second goroutine.
func TestWatcherSignalsOnceRoomIsMade(t *testing.T) {
	rc, f, peer := watchedPair(t)
	var (
		l       Lifecycle
		w       Watcher
		wg      sync.WaitGroup
		started int
	)
	stop := make(chan struct{})
	signals := make(chan struct{}, 8)
	start := func() {
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.WatchLoop(rc, stop, func() { signals <- struct{}{} })
		}()
	}
	w.Refused(&l, start)
	select {
	case <-signals:
		t.Fatal("signalled while the socket is still full")
	case <-time.After(50 * time.Millisecond):
	}
	drain := func() {
		b := make([]byte, 512)
		for {
			if _, err := unix.Read(peer, b); err != nil {
				return
			}
		}
	}
	drain()
	select {
	case <-signals:
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after the peer drained")
	}

	w.Refused(&l, start)
	select {
	case <-signals:
	case <-time.After(10 * time.Second):
		t.Fatal("no signal for the second refusal")
	}
	require.Equal(t, 1, started, "one goroutine serves every refusal")

	close(stop)
	f.Close()
	wg.Wait()
}

// TestWatcherStartsNothingAfterClose: once Close has begun, a refusal
// starts no goroutine (Close may already be waiting for them).
func TestWatcherStartsNothingAfterClose(t *testing.T) {
	var (
		l Lifecycle
		w Watcher
	)
	l.BeginClose()
	w.Refused(&l, func() { t.Fatal("a watcher started after Close began") })
}
