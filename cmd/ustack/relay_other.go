//go:build !linux

package main

import "syscall"

// relayAttr starts the relay as a plain child: namespaces are Linux's,
// and so is Isolate, which then fails the relay with ErrNotSupported.
func relayAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
