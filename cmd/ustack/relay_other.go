//go:build !linux

package main

import (
	"os"
	"syscall"

	"github.com/ustack-dev/ustack/sandbox"
)

// relayProcAttr refuses: a relay's namespaces are Linux's.
func relayProcAttr(detach bool) (*syscall.SysProcAttr, error) {
	return nil, sandbox.ErrNotSupported
}

// onStdout closes f: no relay runs here.
func onStdout(f *os.File) { f.Close() }
