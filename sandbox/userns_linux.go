package sandbox

// The user namespace of a rootless sandbox: how its ids are mapped
// (UsernsMap: self, or the caller's subordinate ranges through newuidmap)
// and how an existing one is joined (nsenter). The helper that runs in
// it is helper_linux.go's.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootless reports whether New must go through a user namespace: without
// root, creating or entering a network namespace takes one.
func rootless() bool { return os.Geteuid() != 0 }

// joinArgs are nsenter's arguments to enter the network namespace at path
// and the user namespace that owns it (or userns, if given), and the
// descriptors they name, to pass as ExtraFiles from fd 4 on.
func joinArgs(path, userns string) ([]string, []*os.File, error) {
	netf, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: open network namespace %s: %w (give /var/run/netns/NAME or /proc/PID/ns/net)", path, err)
	}
	var userf *os.File
	if userns != "" {
		if userf, err = os.Open(userns); err != nil {
			netf.Close()
			return nil, nil, fmt.Errorf("sandbox: open user namespace %s: %w (give /proc/PID/ns/user)", userns, err)
		}
	} else {
		fd, err := unix.IoctlRetInt(int(netf.Fd()), unix.NS_GET_USERNS)
		if err != nil {
			netf.Close()
			return nil, nil, fmt.Errorf("sandbox: find the user namespace owning %s: %w: name it with -userns /proc/PID/ns/user", path, os.NewSyscallError("ioctl NS_GET_USERNS", err))
		}
		userf = os.NewFile(uintptr(fd), "userns")
	}
	var own, target unix.Stat_t
	if err := unix.Stat("/proc/self/ns/user", &own); err != nil {
		netf.Close()
		userf.Close()
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := unix.Fstat(int(userf.Fd()), &target); err != nil {
		netf.Close()
		userf.Close()
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	if own.Ino == target.Ino && own.Dev == target.Dev {
		// Entering the namespace we are in is refused (EINVAL), and would
		// give no privilege: its owner is the host, so serving it needs root.
		userf.Close()
		return []string{"--net=/proc/self/fd/4"}, []*os.File{netf}, nil
	}
	// Credentials kept: nsenter would otherwise setgroups, which a user
	// namespace made by `unshare -r` denies; our uid is then whatever the
	// namespace maps it to, root for `unshare -r` and for ours.
	return []string{"--preserve-credentials", "--user=/proc/self/fd/5", "--net=/proc/self/fd/4"}, []*os.File{netf, userf}, nil
}

// subIDFiles are the files naming the subordinate uid and gid ranges
// newuidmap and newgidmap let a user map (variables for the tests).
var subIDFiles = [2]string{"/etc/subuid", "/etc/subgid"}

// usernsMap picks the mapping for a new user namespace: the one asked
// for, or auto where newuidmap, newgidmap and ranges in /etc/subuid and
// /etc/subgid exist and self otherwise. Asked for auto explicitly and
// falling back to self, it says so in note; the default ("") falls back
// silently, being documented as auto where available.
func usernsMap(asked string) (mode, note string) {
	if asked == UsernsMapSelf {
		return UsernsMapSelf, ""
	}
	why := autoMissing()
	switch {
	case why == "":
		return UsernsMapAuto, ""
	case asked == UsernsMapAuto:
		return UsernsMapSelf, "user namespace map auto: " + why + "; mapping only your uid and gid, to root inside (self): commands that switch to other users in the sandbox will fail"
	}
	return UsernsMapSelf, ""
}

// autoMissing says what the auto mapping lacks, or "".
func autoMissing() string {
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not installed (package uidmap)"
		}
	}
	for i, f := range subIDFiles {
		if _, _, err := subRange(f, []int{os.Getuid(), os.Getgid()}[i]); err != nil {
			return err.Error()
		}
	}
	return ""
}

// subRange finds the first range of id (or of the caller's user name) in
// file, a subuid or subgid file.
func subRange(file string, id int) (start, count int, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w (add a range with usermod --add-subuids/--add-subgids)", file, err)
	}
	names := []string{strconv.Itoa(id)}
	if u, err := lookupName(os.Getuid()); err == nil {
		names = append(names, u)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 {
			continue
		}
		for _, n := range names {
			if f[0] != n {
				continue
			}
			s, err1 := strconv.Atoi(f[1])
			c, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil && c > 0 {
				return s, c, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("%s has no range for %s (add one with usermod --add-subuids/--add-subgids)", file, strings.Join(names, " or "))
}

// lookupName is the user name of uid, from /etc/passwd.
func lookupName(uid int) (string, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[2] == strconv.Itoa(uid) {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("uid %d not in /etc/passwd", uid)
}

// mapAuto writes the helper's uid and gid maps through newuidmap and
// newgidmap: root inside is the caller, 1 and up the caller's range.
func mapAuto(pid int) error {
	for _, m := range []struct {
		tool, file string
		id         int
	}{{"newuidmap", subIDFiles[0], os.Getuid()}, {"newgidmap", subIDFiles[1], os.Getgid()}} {
		start, count, err := subRange(m.file, m.id)
		if err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		out, err := exec.Command(m.tool, strconv.Itoa(pid), "0", strconv.Itoa(m.id), "1", "1", strconv.Itoa(start), strconv.Itoa(count)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sandbox: %s: %v: %s (use -userns-map self to map only your own ids)", m.tool, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
