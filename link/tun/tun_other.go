//go:build !linux

package tun

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/vnet"
)

// Open returns ErrNotSupported: TUN devices are supported on Linux only.
func Open(name string, opts *Options) (*Endpoint, error) {
	return nil, fmt.Errorf("tun %s: %w", name, ErrNotSupported)
}

// device is empty: Open never makes one here.
type device struct{}

func (*device) close() {}

func (q *queue) write(vnet.Header, *stack.PacketBuffer) (txOutcome, tcpip.Error) {
	return txClosed, nil
}

func (q *queue) rxLoop()     { q.e.wg.Done() }
func (*queue) busyPoll() int { return 0 }
func (q *queue) watchLoop()  { q.e.wg.Done() }
