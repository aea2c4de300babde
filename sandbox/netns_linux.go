package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namespace is the sandbox's network namespace, held open by a handle.
type namespace struct {
	// mu guards handle: Close may close it while a Run is entering the
	// namespace on another thread.
	mu     sync.RWMutex
	handle netns.NsHandle
	path   string // what the user gave, or "" for one we created
	// helper, without root, holds the namespaces instead of handle and
	// becomes the sandbox's command (helper_linux.go).
	helper *helper
	// host: this process's own namespace (Config.Host), no handle.
	host bool
}

// openNamespace attaches to path, or creates a namespace if path is "".
// A created namespace lives as long as the handle and the processes in it.
func openNamespace(path string) (*namespace, error) {
	if path != "" {
		h, err := netns.GetFromPath(path)
		if err != nil {
			return nil, fmt.Errorf("sandbox: open network namespace %s: %w (give /var/run/netns/NAME or /proc/PID/ns/net)", path, err)
		}
		return &namespace{handle: h, path: path}, nil
	}
	var ns *namespace
	err := onThread(func() error {
		// The thread is discarded afterwards (onThread never unlocks it),
		// so moving it into the new namespace cannot leak into other
		// goroutines.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("sandbox: create a network namespace: %w: run as root (CAP_SYS_ADMIN)", os.NewSyscallError("unshare", err))
		}
		h, err := netns.Get()
		if err != nil {
			return fmt.Errorf("sandbox: open the new network namespace: %w", err)
		}
		ns = &namespace{handle: h}
		return nil
	})
	return ns, err
}

// do runs f on a thread inside the namespace; the thread is discarded
// afterwards, so nothing else ever runs in the wrong namespace.
func (n *namespace) do(f func() error) error {
	if n.host {
		return onThread(f)
	}
	return onThread(func() error {
		// Only entering needs the handle: once in, the thread stays in the
		// namespace even if Close closes the handle meanwhile.
		if err := n.enter(); err != nil {
			return err
		}
		return f()
	})
}

// enter moves the calling (locked) thread into the namespace.
func (n *namespace) enter() error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.handle.IsOpen() {
		return errors.New("sandbox: the namespace is closed")
	}
	if err := netns.Set(n.handle); err != nil {
		return fmt.Errorf("sandbox: enter the network namespace: %w", err)
	}
	return nil
}

func (n *namespace) close() {
	if n.host {
		return
	}
	if n.helper != nil {
		n.helper.close()
		return
	}
	n.mu.Lock()
	n.handle.Close()
	n.mu.Unlock()
}

// onThread runs f on a locked OS thread that exits when f returns.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the runtime ends the thread with the goroutine.
		errc <- f()
	}()
	return <-errc
}

// open creates (or attaches to) the namespace and makes the device in
// it: itself as root, through the helper otherwise.
func (n *Namespace) open() error {
	c := &n.cfg
	if c.Host {
		// This process's own namespace: the device is made here, as
		// whoever runs it may (see Config.Host).
		spec := c.deviceSpec()
		return onThread(func() error {
			d, err := createDevice(&spec)
			if err != nil {
				return err
			}
			n.dev = Device{Name: d.Name, TAP: d.TAP, MTU: d.MTU, FDs: d.FDs}
			n.ns = &namespace{host: true}
			return nil
		})
	}
	if rootless() {
		ns, dev, err := startHelper(c, func(w string) { n.warnings = append(n.warnings, "sandbox: "+w) })
		n.ns, n.dev = ns, dev
		return err
	}
	ns, err := openNamespace(c.NetNS)
	if err != nil {
		return err
	}
	n.ns = ns
	spec := c.deviceSpec()
	return ns.do(func() error {
		d, err := createDevice(&spec)
		if err != nil {
			return err
		}
		n.dev = Device{Name: d.Name, TAP: d.TAP, MTU: d.MTU, FDs: d.FDs}
		return nil
	})
}

// closeFDs closes descriptors nobody took.
func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// run starts cmd inside the namespace and waits for it. The command is
// forked from a thread that is inside the namespace and that stays alive
// until the command has exited, so that a Pdeathsig set on it fires when
// this process dies, not when the thread is recycled.
func (n *namespace) run(cmd *exec.Cmd, started func()) error {
	if n.helper != nil {
		return n.helper.run(cmd, "", started)
	}
	errc := make(chan error, 1)
	err := n.do(func() error {
		if err := cmd.Start(); err != nil {
			return err
		}
		started()
		errc <- cmd.Wait()
		return nil
	})
	if err != nil {
		return err
	}
	return <-errc
}

// Init must be called first thing in main by programs that start commands
// in a sandbox with Config.ResolvConf (cmd/ustack does): when the process
// is the sandbox's re-executed helper, it gives itself a private
// /etc/resolv.conf and becomes the command; otherwise it returns at once.
// It never returns in the helper.
//
// Without root, the sandbox's namespaces are made by this program
// re-executed as a helper too (see the package doc), which Init runs.
func Init() {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Unsetenv(helperEnv)
		helperMain(spec)
	}
	if os.Getenv(initEnv) == "" {
		return
	}
	src := os.Getenv(initEnv)
	os.Unsetenv(initEnv)
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "ustack sandbox: helper started without a command")
		os.Exit(127)
	}
	bindResolv(src)
	execCommand(os.Args[1], os.Args[2:], os.Environ())
}

// bindResolv binds src over /etc/resolv.conf in this process's mount
// namespace, which must be its own, or says why it could not.
func bindResolv(src string) {
	// Making every mount private keeps the bind from propagating back to
	// the host's /etc.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintf(os.Stderr, "ustack sandbox: make mounts private: %v; /etc/resolv.conf left as it is\n", err)
	} else if err := unix.Mount(src, resolvConf, "", unix.MS_BIND, ""); err != nil {
		fmt.Fprintf(os.Stderr, "ustack sandbox: bind %s over %s: %v; the command uses the host's resolver configuration\n", src, resolvConf, err)
	}
}

// execCommand becomes the command, or exits with the shell's status for a
// command that cannot be run (126 not executable, 127 otherwise).
func execCommand(path string, argv, env []string) {
	err := unix.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "ustack sandbox: exec %s: %v\n", path, err)
	if errors.Is(err, unix.EACCES) {
		os.Exit(126)
	}
	os.Exit(127)
}
