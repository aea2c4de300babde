// Package pollcost measures what Go's network poller and scheduler cost a
// relay per message: it relays TCP connections two ways, with goroutines
// parked in Go's poller (ModePoller, as every relay in this module does)
// or with one goroutine blocking in an epoll of its own (ModeLoop, as
// slirp4netns's event loop does), so that scripts/pollcost.sh can put a
// request/response exchange through both, side by side. It is a
// measuring instrument for the sandbox latency work, not a relay to
// build on: ModeLoop holds a thread in epoll_pwait per connection.
package pollcost

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Mode is how Relay waits for data.
type Mode string

const (
	// ModePoller copies each direction in its own goroutine over the
	// net.Conns, with read and write: every wait parks in Go's poller,
	// and the scheduler looks at the poller each time it runs out of
	// goroutines.
	ModePoller Mode = "poller"
	// ModeLoop serves both directions in one goroutine that blocks in
	// epoll_pwait on a level-triggered epoll of its own holding both
	// sockets, outside Go's poller: per message one epoll_pwait, one
	// read and one write.
	ModeLoop Mode = "loop"
)

// ParseMode returns the Mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModePoller, ModeLoop:
		return m, nil
	}
	return "", fmt.Errorf("pollcost: unknown mode %q (poller or loop)", s)
}

// Relay copies between a and b, both ways, until both directions have
// ended: a direction ends at its source's end of file, which is passed
// on as a half-close, or at an error, which ends both. It closes a and b
// before it returns, and returns the first error other than the end of
// a connection.
func Relay(a, b *net.TCPConn, m Mode) error {
	defer a.Close()
	defer b.Close()
	if m == ModeLoop {
		return loop(a, b)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	copyHalf := func(i int, dst, src *net.TCPConn) {
		defer wg.Done()
		// Plain reads and writes, as the loop makes: io.Copy between two
		// TCPConns would splice through a pipe, twice the system calls.
		buf := make([]byte, 64<<10)
		if _, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf); err != nil {
			errs[i] = err
			// The other direction cannot go on alone.
			a.Close()
			b.Close()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go copyHalf(0, b, a)
	go copyHalf(1, a, b)
	wg.Wait()
	// A direction that failed closed both connections under the other,
	// which then saw net.ErrClosed: the first failure is the one to tell.
	for _, err := range errs {
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
	}
	return nil
}
