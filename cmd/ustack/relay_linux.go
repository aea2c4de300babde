package main

import (
	"os"
	"syscall"
)

// relayProcAttr is how a relay process is started: in new mount and PID
// namespaces (and a user namespace without root), in a process group of
// its own and dying with the thread that starts it, or, detached, in a
// session of its own and not dying with it.
func relayProcAttr(detach bool) (*syscall.SysProcAttr, error) {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}
	if detach {
		// No terminal's signals, no parent-death signal: it outlives
		// the supervisor, as a daemon.
		a.Setsid = true
	} else {
		// Its own process group: a terminal's Ctrl-C is for the
		// supervisor's command, which ends, and then the supervisor
		// stops the relay.
		a.Setpgid = true
		a.Pdeathsig = syscall.SIGKILL
	}
	if os.Geteuid() != 0 {
		// Without root, mount and PID namespaces take a user namespace,
		// where the relay is root mapped to the caller: it owns nothing
		// more than the caller does, on the host.
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a, nil
}

// onStdout makes f (which it closes) this process's standard output and
// error.
func onStdout(f *os.File) {
	for fd := 1; fd <= 2; fd++ {
		syscall.Dup3(int(f.Fd()), fd, 0)
	}
	f.Close()
}
