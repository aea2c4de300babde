//go:build !linux

package main

import (
	"os"

	"github.com/ustack-dev/ustack/sandbox"
)

// openNSWatch refuses: namespaces are Linux's.
func openNSWatch(netns string, pid int) (*os.File, string, error) {
	return nil, "", sandbox.ErrNotSupported
}

// nsWatch is never made here.
type nsWatch struct{ gone chan struct{} }

func watchNS(fd int, name string) (*nsWatch, error) { return nil, sandbox.ErrNotSupported }

func (w *nsWatch) close() {}
