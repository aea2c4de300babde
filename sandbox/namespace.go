package sandbox

import (
	"errors"
	"sync"
)

// Namespace is a sandbox's namespace side: the network namespace, created
// or attached to, with the sandbox's device made in it and configured,
// and the commands run in it; no stack. New is OpenNamespace and Serve in
// one process. A program that confines its relay in a process of its own
// (ustack's commands do) keeps the Namespace and hands the device to the
// relay, which Serves it. Its methods are safe for concurrent use.
type Namespace struct {
	cfg      Config
	ns       *namespace
	warnings []string

	mu       sync.Mutex
	dev      Device // until TakeDevice
	taken    bool
	closed   bool
	closeErr error
}

// Device is the sandbox's device as its namespace side made it, to be
// served (Serve) in this process or another.
type Device struct {
	// Name is the device's name in the namespace.
	Name string
	// TAP: a TAP device (Ethernet frames); false: TUN (IP packets).
	TAP bool
	// MTU is the device's MTU.
	MTU uint32
	// FDs are the device's descriptors, one per queue, in this process.
	FDs []int
}

// OpenNamespace creates (or attaches to) the sandbox's namespace and
// makes its device, as New does, but serves nothing: take the device
// (TakeDevice) to Serve it. A nil c means the documented defaults; the
// Namespace does not keep c.
func OpenNamespace(c *Config) (*Namespace, error) {
	// The port forwards are checked here too, as the user who started
	// it: a relay in a user namespace of its own is root there, not on
	// the host.
	cfg, err := checked(c)
	if err != nil {
		return nil, err
	}
	n := &Namespace{cfg: cfg}
	if err := n.open(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Config returns the configuration with its defaults filled in.
func (n *Namespace) Config() Config { return n.cfg }

// Warnings says what the namespace side does otherwise than asked, one
// sentence each, for the user.
func (n *Namespace) Warnings() []string { return append([]string(nil), n.warnings...) }

// TakeDevice hands the device over: its descriptors are the caller's
// from then on (Serve takes them over in turn). It can be done once.
func (n *Namespace) TakeDevice() (Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return Device{}, errors.New("sandbox: the namespace is closed")
	case n.taken:
		return Device{}, errors.New("sandbox: the device was taken already")
	}
	n.taken = true
	d := n.dev
	n.dev.FDs = nil
	return d, nil
}

// Close lets the namespace go (with the processes in it, if it created
// it) and closes the device if it was not taken. Idempotent.
func (n *Namespace) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return n.closeErr
	}
	n.closed = true
	fds := n.dev.FDs
	n.dev.FDs = nil
	n.mu.Unlock()
	closeFDs(fds)
	if n.ns != nil {
		n.ns.close()
	}
	return nil
}
