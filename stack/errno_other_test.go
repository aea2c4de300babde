//go:build !linux

package stack_test

import "syscall"

// wantNoNet is what TranslateError gives for gVisor's ErrNoNet where
// there is no ENONET.
const wantNoNet = syscall.ENETUNREACH
