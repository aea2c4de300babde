package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// relaySyscalls are the system calls a serving sandbox makes: the Go
// runtime's (memory, threads, signals, timers, the network poller), the
// relay's sockets and files, and waiting for and signalling the command.
// Names the machine's architecture lacks are skipped.
var relaySyscalls = []string{
	// I/O on descriptors.
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
	"close", "close_range", "fstat", "newfstatat", "statx", "lseek", "fcntl", "dup", "dup3",
	"ioctl", "poll", "ppoll", "select", "pselect6", "fsync", "fstatfs", "getdents64",
	"openat", "readlinkat", "unlinkat", "getcwd", "pipe", "pipe2", "eventfd2",
	// Zero-copy paths net.TCPConn takes (io.Copy between sockets, files).
	"splice", "sendfile", "copy_file_range", "tee",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
	// Memory.
	"mmap", "munmap", "mremap", "mprotect", "madvise", "brk", "mincore",
	// Threads, scheduling, time.
	"futex", "sched_yield", "sched_getaffinity", "nanosleep", "clock_gettime", "clock_nanosleep",
	"clock_getres", "gettimeofday", "time", "gettid", "getpid", "getppid", "set_robust_list",
	"timer_create", "timer_settime", "timer_delete", "setitimer", "getitimer",
	"exit", "exit_group", "restart_syscall", "uname", "getrandom", "getrlimit", "prlimit64",
	"getuid", "geteuid", "getgid", "getegid", "sysinfo", "rseq", "membarrier",
	// Signals, and the command: wait for it, pass signals on.
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "rt_sigpending",
	"tgkill", "tkill", "kill", "pidfd_send_signal", "pidfd_open", "waitid", "wait4",
	// Sockets (socket itself is conditional, below).
	"socketpair", "connect", "bind", "listen", "accept", "accept4", "getsockname", "getpeername",
	"setsockopt", "getsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
	"shutdown",
}

// confinePolicy is the seccomp policy of a serving sandbox: relaySyscalls
// are allowed; socket is, except for raw and packet sockets; clone is
// only for new threads (CLONE_THREAD), so no process can be forked; every
// other call, execve and execveat first, fails with EPERM (clone3 with
// ENOSYS, so that glibc falls back to clone).
func confinePolicy() (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, err
	}
	var names []string
	for _, n := range relaySyscalls {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	// go-seccomp-bpf v1.6.0 leaves a conditional rule's argument in the
	// accumulator when the rule does not match, and the next group then
	// compares it as if it were the system call's number: so the
	// unconditional groups come first and the conditional ones last,
	// socket's (whose argument is never a syscall number clone's check
	// would take) before clone's, after which only the default remains.
	var socketSets []seccomp.ArgumentConditions
	for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
		for _, flags := range []uint64{0, unix.SOCK_CLOEXEC, unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK} {
			socketSets = append(socketSets, seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_PACKET},
				{Argument: 1, Operation: seccomp.Equal, Value: typ | flags},
			})
		}
	}
	var socketRules []seccomp.NameWithConditions
	for _, c := range socketSets {
		socketRules = append(socketRules, seccomp.NameWithConditions{Name: "socket", Conditions: c})
	}
	p := seccomp.Policy{
		DefaultAction: seccomp.ActionErrno,
		Syscalls: []seccomp.SyscallGroup{
			{
				// glibc's pthread_create (cgo's threads) tries clone3
				// first and falls back to clone on ENOSYS only; clone3's
				// flags are in memory, out of a filter's sight, so it is
				// refused as missing.
				Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
				Names:  []string{"clone3"},
			},
			{Action: seccomp.ActionAllow, Names: names},
			// Stream and datagram sockets of any family but AF_PACKET,
			// with or without the flags Go and x/net/icmp give: not
			// SOCK_RAW.
			{Action: seccomp.ActionAllow, NamesWithCondtions: socketRules},
			{
				Action: seccomp.ActionAllow,
				NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD}}},
				},
			},
		},
	}
	return p, nil
}

// Confine confines this process once the sandbox serves (and its command,
// if any, runs: commands started afterwards would inherit the filter and
// could not be executed): it opens the ping relay's host sockets, then
// ConfineProcess. It cannot be undone.
func (s *Sandbox) Confine() error {
	s.fw.OpenPing()
	keep := uint64(1) << keptCap
	if s.cfg.Mark != 0 {
		// Every new flow's host socket is marked (SO_MARK), which takes
		// CAP_NET_RAW since Linux 5.17; the filter still refuses the raw
		// and packet sockets it is otherwise for.
		keep |= 1 << unix.CAP_NET_RAW
	}
	return confineProcess(keep)
}

// ConfineProcess confines a relay process once it has opened what it
// needs: as root, it switches every thread to an unprivileged uid and gid
// (nobody's, 65534, where the user namespace maps them, as pasta does),
// keeping CAP_NET_BIND_SERVICE if held (for forwards below port 1024
// added through the API socket); it drops every other capability from
// every thread and the bounding set, sets no_new_privs and loads a
// seccomp filter on every thread (TSYNC) that allows only the system
// calls a relay needs (relaySyscalls): a denied call fails with EPERM, so
// the process can no longer execute a program, fork, or open a raw or
// packet socket. Run after Isolate, it leaves a process that reaches
// nothing of the host's but what it holds open. It cannot be undone.
func ConfineProcess() error { return confineProcess(1 << keptCap) }

// confineProcess is ConfineProcess keeping the capabilities in the mask
// keep, if held, rather than keptCap alone.
func confineProcess(keep uint64) error {
	if err := dropPrivileges(keep); err != nil {
		return err
	}
	p, err := confinePolicy()
	if err != nil {
		return fmt.Errorf("sandbox: seccomp policy: %w", err)
	}
	if !seccomp.Supported() {
		return fmt.Errorf("sandbox: confine: this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER): serve unconfined, or use a kernel built with them")
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}); err != nil {
		return fmt.Errorf("sandbox: load the seccomp filter: %w", err)
	}
	return nil
}

// Isolate gives this process an empty, read-only root filesystem, as
// slirp4netns's --enable-sandbox and pasta do: a tmpfs with nothing in
// it but a /proc of the process's own, pivoted to as the root, the
// host's tree detached. It must run as the first process of mount and
// PID namespaces of its own, such as a relay process started with
// CLONE_NEWNS and CLONE_NEWPID (and CLONE_NEWUSER without root) is: it
// refuses to run in its parent's mount namespace, where pivot_root would
// change the root of every process there (where it cannot tell, the
// kernel refuses pivot_root in a mount namespace it does not own). Its /proc shows that PID
// namespace only, this process alone, and only the processes' entries
// (subset=pid), which is what the capability drop of ConfineProcess
// needs to find every thread in a build with cgo. Afterwards no path of
// the host's filesystem is reachable, and what the process opened before
// stays open. It cannot be undone.
func Isolate() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("sandbox: isolate: read this process's mount namespace: %w", err)
	}
	// Where the parent's namespace cannot be read (the parent is another
	// user's, as a relay in a user namespace of its own sees it), the
	// kernel refuses pivot_root in a mount namespace this process does
	// not own, so the check below is only needed, and made, where it can.
	if parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", parentPID())); err == nil && parent == self {
		return fmt.Errorf("sandbox: isolate: this process shares its parent's mount namespace (%s): start it in one of its own (CLONE_NEWNS)", self)
	}
	if os.Getpid() != 1 {
		return errors.New("sandbox: isolate: this process is not the first of a PID namespace of its own: start it in one (CLONE_NEWPID), so that its /proc shows it alone")
	}
	steps := []struct {
		what string
		do   func() error
	}{
		// Nothing done here may reach the host's mounts.
		{"make every mount private", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		// The new root: /tmp exists everywhere, and over it, in this
		// namespace only, an empty tmpfs that can hold nothing.
		{"mount an empty tmpfs", func() error {
			return unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=2,mode=0555")
		}},
		{"enter it", func() error { return unix.Chdir("/tmp") }},
		{"make its /proc", func() error { return unix.Mkdir("proc", 0o555) }},
		{"mount its /proc", func() error {
			return unix.Mount("proc", "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible,subset=pid")
		}},
		// new_root and put_old may be the same directory (pivot_root(2)):
		// the old root is then stacked on it, and detached next.
		{"pivot_root", func() error { return unix.PivotRoot(".", ".") }},
		{"detach the host's tree", func() error { return unix.Unmount(".", unix.MNT_DETACH) }},
		{"enter the new root", func() error { return unix.Chdir("/") }},
		{"make it read-only", func() error {
			return unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("sandbox: isolate: %s: %w", st.what, err)
		}
	}
	return nil
}

// keptCap is the one capability a confined sandbox keeps, if it has it:
// binding host ports below 1024 for forwards added at run time. Every
// other privilege the relay uses is spent before: the TUN device and the
// namespace exist, the ping relay's raw sockets (CAP_NET_RAW) are open.
const keptCap = unix.CAP_NET_BIND_SERVICE

// parentPID is this process's parent as the mounted /proc numbers it: in
// a PID namespace of its own the parent is outside, where getppid says 0,
// but the host's /proc, still mounted, knows it.
func parentPID() int {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command's name, in parentheses, may hold spaces: the fields
	// after it are "state ppid ...".
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				return n
			}
		}
	}
	return 0
}

// nobody is the uid and gid a root relay switches to, where its user
// namespace maps them: the overflow ids (nobody, nogroup) that own
// nothing.
const nobody = 65534

// dropPrivileges leaves every thread at most the capabilities in the
// mask keep (keptCap's, for a relay) in its effective and permitted sets,
// nothing inheritable, and a bounding set of at most keep; as root, where
// nobody is mapped, it first switches every thread to nobody's uid and
// gid with no supplementary groups, keeping keep across the switch. Capabilities and credentials belong to each
// thread, so each thread must change its own: psx runs the system calls
// on all of them at once, through the Go runtime's AllThreadsSyscall in a
// build without cgo, and through libpsx's signal to every thread in one
// with cgo (where AllThreadsSyscall refuses to).
func dropPrivileges(keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: read this process's capabilities: %w", os.NewSyscallError("capget", err))
	}
	if data[0].Permitted == 0 && data[1].Permitted == 0 && data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		// Unprivileged: nothing to drop. The bounding set cannot be
		// lowered without CAP_SETPCAP, and only matters to execve, which
		// no_new_privs and the filter forbid.
		return nil
	}
	kept := (uint64(data[1].Permitted)<<32 | uint64(data[0].Permitted)) & keep
	// The bounding set first, while CAP_SETPCAP is still held (lowering
	// it takes that capability); without it the empty permitted set and
	// no_new_privs bound us just as well.
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c <= lastCap(); c++ {
			if keep&(1<<c) != 0 {
				continue
			}
			if _, _, e := psx.Syscall3(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
				return fmt.Errorf("sandbox: drop capability %d from the bounding set: %w (serve unconfined if this process may not)", c, os.NewSyscallError("prctl PR_CAPBSET_DROP", e))
			}
		}
	}
	if os.Geteuid() == 0 && data[0].Effective&(1<<unix.CAP_SETUID) != 0 && data[0].Effective&(1<<unix.CAP_SETGID) != 0 && idMapped("/proc/self/uid_map", nobody) && idMapped("/proc/self/gid_map", nobody) {
		if err := becomeNobody(); err != nil {
			return err
		}
	}
	data = [2]unix.CapUserData{
		{Permitted: uint32(kept), Effective: uint32(kept)},
		{Permitted: uint32(kept >> 32), Effective: uint32(kept >> 32)},
	}
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("sandbox: drop capabilities: %w (serve unconfined if this process may not)", os.NewSyscallError("capset", e))
	}
	return nil
}

// becomeNobody switches every thread to nobody's uid and gid, without
// supplementary groups, keeping the permitted capabilities across the
// switch (PR_SET_KEEPCAPS) for dropPrivileges to trim.
func becomeNobody() error {
	steps := []struct {
		what     string
		nr, a, b uintptr
		c        uintptr
	}{
		{"prctl PR_SET_KEEPCAPS", unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0},
		{"setgroups", unix.SYS_SETGROUPS, 0, 0, 0},
		{"setresgid", unix.SYS_SETRESGID, nobody, nobody, nobody},
		{"setresuid", unix.SYS_SETRESUID, nobody, nobody, nobody},
		{"prctl PR_SET_KEEPCAPS", unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 0, 0},
	}
	for _, st := range steps {
		if _, _, e := psx.Syscall3(st.nr, st.a, st.b, st.c); e != 0 {
			return fmt.Errorf("sandbox: switch to uid and gid %d: %w (serve unconfined if this process may not)", nobody, os.NewSyscallError(st.what, e))
		}
	}
	return nil
}

// idMapped reports whether id, as this process's user namespace sees it,
// is mapped in the map file (/proc/self/uid_map or gid_map).
func idMapped(file string, id uint32) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.ParseUint(f[0], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil && uint64(id) >= first && uint64(id) < first+count {
			return true
		}
	}
	return false
}

// lastCap is the kernel's highest capability number, which may be below
// or above the one golang.org/x/sys knows.
func lastCap() int {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}
