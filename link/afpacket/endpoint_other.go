//go:build !linux

package afpacket

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/link/internal/linkutil"
)

// queue has only its counters here: no Endpoint is ever made.
type queue struct {
	e    *Endpoint
	gate linkutil.PollGate
	gro  linkutil.GRO // for the counters shared with Linux (ThinnedACKs)
	counters
}

// txScratch is a TX call's scratch; it exists on Linux only.
type txScratch struct{}

func (q *queue) addCacheStats(*cache.Stats) {}

func (e *Endpoint) closeCaches() {}

// New returns ErrNotSupported: AF_PACKET is Linux's. It still checks its
// arguments, so that a bad configuration is reported as such everywhere.
func New(ifname string, opts *Options) (*Endpoint, error) {
	if _, err := opts.normalize(); err != nil {
		return nil, err
	}
	if err := checkIfName(ifname); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("afpacket: interface %q: %w", ifname, ErrNotSupported)
}

func (q *queue) rxLoop() { q.e.wg.Done() }

func (*queue) busyPoll() int { return 0 }

func (*queue) close() {}

// WritePackets implements stack.LinkWriter; without AF_PACKET it sends
// nothing.
func (*Endpoint) WritePackets(stack.PacketBufferList) (int, tcpip.Error) {
	return 0, &tcpip.ErrNotSupported{}
}
