//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ErrNotSupported is returned by New on systems other than Linux.
var ErrNotSupported = errors.New("sandbox: network namespaces and TUN devices are supported on Linux only")

type namespace struct{}

func (*namespace) close() {}

func (n *Namespace) open() error { return ErrNotSupported }

func closeFDs([]int) {}

// Init does nothing on this system.
func Init() {}

// Run returns ErrNotSupported on this system.
func (s *Sandbox) Run(*exec.Cmd, func(*os.Process)) error { return ErrNotSupported }

// Run returns ErrNotSupported on this system.
func (n *Namespace) Run(*exec.Cmd, func(*os.Process)) error { return ErrNotSupported }

// Confine returns ErrNotSupported on this system.
func (s *Sandbox) Confine() error { return ErrNotSupported }

// Isolate returns ErrNotSupported on this system.
func Isolate() error { return ErrNotSupported }

// ConfineProcess returns ErrNotSupported on this system.
func ConfineProcess() error { return ErrNotSupported }

// socketControl binds and marks nothing here: the sandbox serves nothing
// on this system (New returns ErrNotSupported).
func socketControl(string, uint32) func(string, string, syscall.RawConn) error { return nil }
