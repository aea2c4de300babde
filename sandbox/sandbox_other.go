//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"

	"github.com/ustack-dev/ustack/link/tun"
)

// ErrNotSupported is returned by New on systems other than Linux.
var ErrNotSupported = errors.New("sandbox: network namespaces and TUN devices are supported on Linux only")

type namespace struct{}

func openNamespace(string) (*namespace, error)               { return nil, ErrNotSupported }
func (*namespace) openDevice(*Config) (*tun.Endpoint, error) { return nil, ErrNotSupported }
func (*namespace) close()                                    {}

// Init does nothing on this system.
func Init() {}

// Run returns ErrNotSupported on this system.
func (s *Sandbox) Run(*exec.Cmd, func(*os.Process)) error { return ErrNotSupported }

// Confine returns ErrNotSupported on this system.
func (s *Sandbox) Confine() error { return ErrNotSupported }

func rootless() bool { return false }

func startHelper(*Config, func(string)) (*namespace, *tun.Endpoint, error) {
	return nil, nil, ErrNotSupported
}
