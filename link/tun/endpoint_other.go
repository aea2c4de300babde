//go:build !linux

package tun

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

// Create returns ErrNotSupported: TUN and TAP devices are Linux's. It
// still checks its arguments, so that a bad configuration is reported as
// such everywhere.
func Create(name string, opts *Options) (*Device, error) {
	if _, err := opts.normalize(); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("tun %s: %w", name, ErrNotSupported)
}

// Close does nothing: no Device has descriptors off Linux.
func (d *Device) Close() { d.FDs = nil }

// Open returns ErrNotSupported: TUN and TAP devices are Linux's. Like
// Create, it checks its arguments first.
func Open(name string, opts *Options) (*Endpoint, error) {
	_, err := Create(name, opts)
	return nil, err
}

// OpenFD returns ErrNotSupported: TUN and TAP devices are Linux's. Like Open, it
// checks its arguments first, and it never closes fd.
func OpenFD(fd int, opts *Options) (*Endpoint, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, fmt.Errorf("tun fd %d: %w", fd, err)
	}
	if err := checkAdopted(fd, &o); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("tun fd %d: %w", fd, ErrNotSupported)
}

func (q *queue) rxLoop() { q.e.wg.Done() }

func (*queue) busyPoll() int { return 0 }

func (*queue) close() {}

func (*queue) addCacheStats(*cache.Stats) {}

func (*Endpoint) closeCaches() {}

func (*Endpoint) setKernelOffloads(bool) {}

// WritePackets implements stack.LinkWriter; without TUN it sends nothing.
func (*Endpoint) WritePackets(stack.PacketBufferList) (int, tcpip.Error) {
	return 0, &tcpip.ErrNotSupported{}
}

// OpenFDs returns ErrNotSupported: TUN and TAP devices are Linux's. It
// never closes the descriptors.
func OpenFDs(fds []int, opts *Options) (*Endpoint, error) {
	if len(fds) == 0 {
		return nil, fmt.Errorf("tun: no descriptor to adopt: %w", ErrNotSupported)
	}
	return nil, fmt.Errorf("tun fd %d: %w", fds[0], ErrNotSupported)
}
