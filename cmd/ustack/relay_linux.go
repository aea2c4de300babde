package main

import (
	"os"
	"syscall"
)

// relayAttr is how the relay process is started: in new mount and PID
// namespaces, and without root a user namespace where it is root mapped
// to the caller.
func relayAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		// Its own process group: a terminal's Ctrl-C is for the
		// supervisor's command, which ends, and then the supervisor
		// stops the relay.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
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
	return a
}
