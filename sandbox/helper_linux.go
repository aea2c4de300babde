package sandbox

// The rootless sandbox's helper: this program re-executed in the
// sandbox's namespaces (startHelper), which makes the device there, hands
// its descriptor over a unix socket, and becomes the sandbox's command
// (helperMain); and the messages between the two.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// helperEnv carries, to the re-executed rootless helper (Init), what it is
// to set up, as JSON (helperSpec).
const helperEnv = "USTACK_SANDBOX_HELPER"

// helperFD is the helper's end of its unix socket to this process: the
// first of exec.Cmd.ExtraFiles.
const helperFD = 3

// helperSpec is what the helper sets up.
type helperSpec struct {
	// The device to create (createDevice).
	deviceSpec
	// AwaitMap: the parent writes the uid and gid maps (newuidmap) after
	// the helper started; the helper waits for its word, then re-executes
	// itself to gain its capabilities as the namespace's root.
	AwaitMap bool
	// NewMountNS: the helper must create its own mount namespace before
	// binding resolv.conf (it joined namespaces through nsenter instead of
	// being cloned into new ones).
	NewMountNS bool
}

// helperMsg is one message on the helper's socket, either way.
type helperMsg struct {
	Err  string   `json:",omitempty"` // helper: setup failed
	Name string   `json:",omitempty"` // helper: the device's name (the fd rides along)
	MTU  uint32   `json:",omitempty"` // helper: the device's MTU
	Path string   `json:",omitempty"` // parent: run this command (stdin, stdout, stderr ride along)
	Args []string `json:",omitempty"`
	Env  []string `json:",omitempty"`
	Dir  string   `json:",omitempty"`
	// Resolv is the file to bind over /etc/resolv.conf, or "".
	Resolv string `json:",omitempty"`
}

// helper is a rootless sandbox's helper process, which holds the
// namespaces and becomes the sandbox's command.
type helper struct {
	cmd  *exec.Cmd
	sock *os.File // this process's end of the socket
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	mu      sync.Mutex
	started bool // the helper was told to run a command
}

// startHelper starts the helper in new user, network and mount namespaces
// (cfg.NetNS == "") or in cfg.NetNS and the user namespace that owns it,
// lets it create and configure the device, and receives the device's
// descriptor. warn takes what the sandbox does otherwise than asked (for
// Warnings).
func startHelper(cfg *Config, warn func(string)) (*namespace, Device, error) {
	if cfg.Queues > 1 {
		return nil, Device{}, fmt.Errorf("sandbox: %d TUN queues: without root the device is created in a helper and passed over as one descriptor: use 1 queue, or run as root", cfg.Queues)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, Device{}, fmt.Errorf("sandbox: find this program to re-execute as the namespace helper: %w", err)
	}
	spec := helperSpec{deviceSpec: cfg.deviceSpec()}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, Device{}, fmt.Errorf("sandbox: socket to the namespace helper: %w", os.NewSyscallError("socketpair", err))
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "ustack-helper"), os.NewFile(uintptr(fds[1]), "ustack-helper")
	// Closed once the helper has its copy (or failed to start), so that
	// the helper's end closing reads as EOF here.
	defer theirs.Close()
	h := &helper{sock: mine, done: make(chan struct{})}
	var extra []*os.File
	var mapper func(pid int) error
	if cfg.NetNS == "" {
		h.cmd = exec.Command(self, "ustack-sandbox-helper")
		h.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
		mode, note := usernsMap(cfg.UsernsMap)
		if note != "" {
			warn(note)
		}
		if mode == UsernsMapAuto {
			spec.AwaitMap = true
			mapper = mapAuto
		} else {
			h.cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			h.cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
			h.cmd.SysProcAttr.GidMappingsEnableSetgroups = false
		}
	} else {
		args, files, err := joinArgs(cfg.NetNS, cfg.UserNS)
		if err != nil {
			mine.Close()
			return nil, Device{}, err
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		extra = files
		nsenter, err := exec.LookPath("nsenter")
		if err != nil {
			mine.Close()
			return nil, Device{}, fmt.Errorf("sandbox: serve %s without root: joining its user namespace takes nsenter (util-linux), which is not on PATH: install util-linux, or run as root", cfg.NetNS)
		}
		h.cmd = exec.Command(nsenter, append(args, "--", self, "ustack-sandbox-helper")...)
		h.cmd.SysProcAttr = &syscall.SysProcAttr{}
		spec.NewMountNS = true
	}
	js, err := json.Marshal(spec)
	if err != nil {
		mine.Close()
		return nil, Device{}, fmt.Errorf("sandbox: %w", err)
	}
	h.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	h.cmd.Env = append(os.Environ(), helperEnv+"="+string(js))
	h.cmd.ExtraFiles = append([]*os.File{theirs}, extra...)
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		mine.Close()
		if cfg.NetNS == "" {
			return nil, Device{}, fmt.Errorf("sandbox: create user, network and mount namespaces: %w: unprivileged user namespaces may be off (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, or the AppArmor restriction kernel.apparmor_restrict_unprivileged_userns=0), or run as root", err)
		}
		return nil, Device{}, fmt.Errorf("sandbox: start the namespace helper: %w", err)
	}
	theirs.Close()
	for _, f := range extra {
		f.Close()
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	ns := &namespace{path: cfg.NetNS, helper: h}
	ok := false
	defer func() {
		if !ok {
			ns.close()
		}
	}()
	if mapper != nil {
		if err := mapper(h.cmd.Process.Pid); err != nil {
			return nil, Device{}, err
		}
		if err := sendMsg(mine, helperMsg{}, nil); err != nil {
			return nil, Device{}, fmt.Errorf("sandbox: tell the namespace helper it is mapped: %w", err)
		}
	}
	m, got, err := recvMsg(mine, 1)
	if err != nil {
		<-h.done
		return nil, Device{}, fmt.Errorf("sandbox: the namespace helper ended before passing the TUN device (%v): %w", h.err, err)
	}
	if m.Err != "" {
		return nil, Device{}, errors.New(m.Err)
	}
	if len(got) != 1 {
		closeAll(got)
		return nil, Device{}, errors.New("sandbox: the namespace helper passed no TUN descriptor")
	}
	ok = true
	return ns, Device{Name: m.Name, TAP: cfg.TAP, MTU: m.MTU, FDs: got}, nil
}

// sendMsg sends m with fds over the helper socket.
func sendMsg(f *os.File, m helperMsg, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return os.NewSyscallError("sendmsg", unix.Sendmsg(int(f.Fd()), b, oob, nil, 0))
}

// recvMsg receives one message and up to max descriptors; io.EOF when the
// other end is gone.
func recvMsg(f *os.File, max int) (helperMsg, []int, error) {
	var m helperMsg
	b := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*max))
	n, oobn, _, _, err := unix.Recvmsg(int(f.Fd()), b, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return m, nil, os.NewSyscallError("recvmsg", err)
	}
	var fds []int
	if oobn > 0 {
		cms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, cm := range cms {
				if got, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if n == 0 && len(fds) == 0 {
		return m, nil, io.EOF
	}
	if err := json.Unmarshal(b[:n], &m); err != nil {
		closeAll(fds)
		return m, nil, fmt.Errorf("bad message from the other end of the helper socket: %w", err)
	}
	return m, fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// closeHelper ends the helper unless it runs the command: closing the
// socket tells it to exit; then it is reaped.
func (h *helper) close() {
	h.sock.Close()
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	if !started {
		<-h.done
	}
}

// run has the helper become cmd, handing it cmd's standard files, and
// waits for it.
func (h *helper) run(cmd *exec.Cmd, resolv string, started func()) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	var (
		files   []*os.File // ours to close once the helper has them
		copiers sync.WaitGroup
		stdio   [3]int
	)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		switch v := s.(type) {
		case *os.File:
			stdio[i] = int(v.Fd())
			continue
		case nil:
			f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("sandbox: %w", err)
			}
			files = append(files, f)
			stdio[i] = int(f.Fd())
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("sandbox: pipe for the command's standard files: %w", err)
		}
		copiers.Add(1)
		if i == 0 {
			files = append(files, r)
			stdio[i] = int(r.Fd())
			go func() {
				defer copiers.Done()
				io.Copy(w, s.(io.Reader))
				w.Close()
			}()
		} else {
			files = append(files, w)
			stdio[i] = int(w.Fd())
			go func() {
				defer copiers.Done()
				io.Copy(s.(io.Writer), r)
				r.Close()
			}()
		}
	}
	h.mu.Lock()
	h.started = true
	h.mu.Unlock()
	m := helperMsg{Path: cmd.Path, Args: cmd.Args, Env: env, Dir: cmd.Dir, Resolv: resolv}
	if err := sendMsg(h.sock, m, stdio[:]); err != nil {
		h.mu.Lock()
		h.started = false
		h.mu.Unlock()
		return fmt.Errorf("sandbox: hand the command to the namespace helper: %w", err)
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	started()
	<-h.done
	// As exec.Cmd.Wait does: the output copiers end with the command's
	// last writer, the input one at the end of Stdin (or at its first
	// write after the command is gone).
	copiers.Wait()
	return h.err
}

// process is the helper's process (the command's, once it runs one).
func (h *helper) process() *os.Process { return h.cmd.Process }

// helperMain is the helper: it sets up the TUN device in the namespaces it
// was started in, passes its descriptor back, and waits to become the
// sandbox's command. It never returns.
func helperMain(specJSON string) {
	sock := os.NewFile(helperFD, "ustack-helper")
	fail := func(format string, a ...any) {
		sendMsg(sock, helperMsg{Err: fmt.Sprintf(format, a...)}, nil)
		os.Exit(1)
	}
	var spec helperSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fail("sandbox helper: %s: %v", helperEnv, err)
	}
	if spec.AwaitMap {
		// Once mapped, this process is root in the namespace, but it
		// lost its capabilities when it was started unmapped: executing
		// again gives them back, as to any root.
		if _, _, err := recvMsg(sock, 0); err != nil {
			os.Exit(1)
		}
		spec.AwaitMap = false
		js, _ := json.Marshal(spec)
		env := append(withoutEnv(os.Environ(), helperEnv), helperEnv+"="+string(js))
		err := unix.Exec("/proc/self/exe", os.Args, env)
		fail("sandbox helper: execute again once mapped: %v", err)
	}
	dev, err := createDevice(&spec.deviceSpec)
	if err != nil {
		fail("%v", err)
	}
	if err := sendMsg(sock, helperMsg{Name: dev.Name, MTU: dev.MTU}, dev.FDs[:1]); err != nil {
		os.Exit(1)
	}
	dev.Close()
	m, stdio, err := recvMsg(sock, 3)
	if err != nil || m.Path == "" || len(stdio) != 3 {
		os.Exit(0) // the sandbox closed without a command
	}
	for i, fd := range stdio {
		if err := unix.Dup3(fd, i, 0); err != nil {
			fmt.Fprintf(os.Stderr, "ustack sandbox: standard file %d: %v\n", i, err)
			os.Exit(127)
		}
		if fd > 2 {
			unix.Close(fd)
		}
	}
	sock.Close()
	if m.Resolv != "" {
		// The mount namespace and the exec must be the same thread's when
		// the namespace is made here.
		runtime.LockOSThread()
		if spec.NewMountNS {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				fmt.Fprintf(os.Stderr, "ustack sandbox: create a mount namespace: %v; the command uses the host's resolver configuration\n", err)
				m.Resolv = ""
			}
		}
		if m.Resolv != "" {
			bindResolv(m.Resolv)
		}
	}
	if m.Dir != "" {
		if err := os.Chdir(m.Dir); err != nil {
			fmt.Fprintf(os.Stderr, "ustack sandbox: %v\n", err)
			os.Exit(127)
		}
	}
	execCommand(m.Path, m.Args, m.Env)
}

// withoutEnv is env without name's entries.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}
