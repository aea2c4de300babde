//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/ustack-dev/ustack/sandbox"
)

// rootlessUser is the unprivileged user the rootless tests run ustack as.
const rootlessUser = "ustack-test"

// rootless is what the rootless tests share: the user, and copies of the
// ustack binary and of this test binary that the user may execute.
type rootless struct {
	cred      *syscall.Credential
	uid       int
	dir       string
	bin, test string
}

// setupRootless creates the unprivileged user if missing, makes
// /dev/net/tun usable by everyone as distributions ship it (restored
// afterwards), and copies the binaries where the user can run them.
func setupRootless(t *testing.T) *rootless {
	needPrivilege(t, "the rootless tests set up a user and /dev/net/tun as root", nsProbe())
	u, err := user.Lookup(rootlessUser)
	if err != nil {
		out, err := exec.Command("useradd", "-M", "-s", "/bin/sh", rootlessUser).CombinedOutput()
		require.NoError(t, err, "useradd %s: %s", rootlessUser, out)
		u, err = user.Lookup(rootlessUser)
		require.NoError(t, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	st, err := os.Stat("/dev/net/tun")
	require.NoError(t, err)
	require.NoError(t, os.Chmod("/dev/net/tun", 0o666))
	t.Cleanup(func() { os.Chmod("/dev/net/tun", st.Mode().Perm()) })

	dir, err := os.MkdirTemp("", "ustack-rootless-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	r := &rootless{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, uid: uid, dir: dir}
	r.bin = filepath.Join(dir, "ustack")
	r.test = filepath.Join(dir, "integration.test")
	self, err := os.Executable()
	require.NoError(t, err)
	copyExec(t, buildUstack(t), r.bin)
	copyExec(t, self, r.test)
	t.Cleanup(func() { r.requireNothingLeft(t) })
	return r
}

func copyExec(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// cmd is argv run as the unprivileged user, in its directory.
func (r *rootless) cmd(argv ...string) *exec.Cmd {
	c := exec.Command(argv[0], argv[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	c.Dir = r.dir
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.dir}
	c.Stderr = os.Stderr
	return c
}

// tun is `ustack tun FLAGS -- the test binary as mode ARGS`, as the user.
func (r *rootless) tun(flags []string, mode string, args ...string) *exec.Cmd {
	argv := append(append([]string{r.bin, "tun"}, flags...), "--", r.test)
	c := r.cmd(append(argv, args...)...)
	c.Env = append(c.Env, childEnv+"="+mode)
	return c
}

// requireNothingLeft checks that no process of the user is left, which
// also means no namespace and no TUN device: they lived in the user's
// processes only.
func (r *rootless) requireNothingLeft(t *testing.T) {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = left[:0]
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == r.uid {
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				left = append(left, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	require.Empty(t, left, "processes of %s left behind", rootlessUser)
}

// TestRootless runs `ustack tun` as an unprivileged user, with
// /dev/net/tun mode 0666, and checks every service of the sandbox.
func TestRootless(t *testing.T) {
	r := setupRootless(t)
	hs := startHostServices(t, netip.MustParseAddr("127.0.0.1"))
	gw := func(p netip.AddrPort) string { return netip.AddrPortFrom(sandbox.DefaultGateway4, p.Port()).String() }
	flags := []string{"-allow-host-loopback", "-dns-upstream", hs.dns.String()}

	t.Run("exit status", func(t *testing.T) {
		err := r.cmd(r.bin, "tun", "--", "sh", "-c", "exit 7").Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 7, ee.ExitCode())
	})
	t.Run("root inside", func(t *testing.T) {
		out, err := r.cmd(r.bin, "tun", "-userns-map", "self", "--", "sh", "-c", "id -u; cat /etc/resolv.conf; ip -o route show default").Output()
		require.NoError(t, err)
		s := string(out)
		require.True(t, strings.HasPrefix(s, "0\n"), "uid inside: %q", s)
		require.Contains(t, s, "nameserver "+sandbox.DefaultDNS4.String())
		require.Contains(t, s, "via "+sandbox.DefaultGateway4.String())
	})
	t.Run("userns map auto", func(t *testing.T) {
		needTool(t, "newuidmap", "uidmap")
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			b, _ := os.ReadFile(f)
			if !strings.Contains(string(b), rootlessUser+":") {
				out, err := exec.Command("usermod", "--add-subuids", "200000-265535", "--add-subgids", "200000-265535", rootlessUser).CombinedOutput()
				require.NoError(t, err, "usermod: %s", out)
				break
			}
		}
		out, err := r.cmd(r.bin, "tun", "-userns-map", "auto", "--", "sh", "-c", "id -u; cat /proc/self/uid_map").Output()
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Equal(t, "0", lines[0])
		require.Len(t, lines, 3, "root and the subordinate range mapped: %q", out)
		require.Equal(t, []string{"0", strconv.Itoa(r.uid), "1"}, strings.Fields(lines[1]))
		require.Equal(t, "1", strings.Fields(lines[2])[0])
	})
	t.Run("userns map auto falls back to self", func(t *testing.T) {
		// The user's subordinate ranges hidden for the run, restored after.
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			b, err := os.ReadFile(f)
			if os.IsNotExist(err) {
				continue
			}
			require.NoError(t, err)
			var kept []string
			for _, line := range strings.SplitAfter(string(b), "\n") {
				if !strings.HasPrefix(line, rootlessUser+":") && !strings.HasPrefix(line, strconv.Itoa(r.uid)+":") {
					kept = append(kept, line)
				}
			}
			require.NoError(t, os.WriteFile(f, []byte(strings.Join(kept, "")), 0o644))
			t.Cleanup(func() { os.WriteFile(f, b, 0o644) })
		}
		c := r.cmd(r.bin, "tun", "-userns-map", "auto", "--", "cat", "/proc/self/uid_map")
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		require.NoError(t, err, "%s", stderr.String())
		require.Equal(t, []string{"0", strconv.Itoa(r.uid), "1"}, strings.Fields(string(out)), "only the user mapped, to root")
		require.Equal(t, 1, strings.Count(stderr.String(), "user namespace map auto: "), "said once: %s", stderr.String())
		require.Contains(t, stderr.String(), "has no range for")
		require.Contains(t, stderr.String(), "mapping only your uid and gid")
	})
	t.Run("http", func(t *testing.T) {
		n := sized(64 << 20)
		out, err := r.tun(flags, "fetch", fmt.Sprintf("http://%s/bytes/%d", gw(hs.http), n)).Output()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), string(out))
	})
	t.Run("tcp both ways", func(t *testing.T) {
		n := sized(16 << 20)
		out, err := r.tun(flags, "both", gw(hs.both), strconv.FormatInt(n, 10)).Output()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), string(out))
	})
	t.Run("udp echo", func(t *testing.T) {
		out, err := r.tun(flags, "udpecho", gw(hs.udp)).Output()
		require.NoError(t, err)
		require.Equal(t, "ok\n", string(out))
	})
	t.Run("dns", func(t *testing.T) {
		out, err := r.tun(flags, "dns", strings.TrimSuffix(dnsName, ".")).Output()
		require.NoError(t, err)
		require.Contains(t, string(out), dnsA.String())
	})
	t.Run("ping gateway", func(t *testing.T) {
		needTool(t, "ping", "iputils-ping")
		c := r.cmd(r.bin, "tun", "--", "ping", "-c", "2", "-W", "5", sandbox.DefaultGateway4.String())
		c.Stderr = nil
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "2 received")
	})
	t.Run("ping relayed", func(t *testing.T) {
		needTool(t, "ping", "iputils-ping")
		// A host address in the benchmarking range on the host's loopback,
		// reached through the relay's ICMP datagram socket: the user has
		// no CAP_NET_RAW.
		lo, err := netlink.LinkByName("lo")
		require.NoError(t, err)
		a, err := netlink.ParseAddr("198.18.99.77/32")
		require.NoError(t, err)
		require.NoError(t, netlink.AddrAdd(lo, a))
		defer netlink.AddrDel(lo, a)
		const rangeFile = "/proc/sys/net/ipv4/ping_group_range"
		old, err := os.ReadFile(rangeFile)
		require.NoError(t, err)
		defer os.WriteFile(rangeFile, old, 0o644)
		ping := func(groups string) (string, error) {
			require.NoError(t, os.WriteFile(rangeFile, []byte(groups), 0o644))
			c := r.cmd(r.bin, "tun", "-stats", "--", "ping", "-c", "2", "-W", "3", "198.18.99.77")
			c.Stderr = nil
			out, err := c.CombinedOutput()
			return string(out), err
		}
		out, err := ping(fmt.Sprintf("%d %d", r.cred.Gid, r.cred.Gid))
		require.NoError(t, err, "%s", out)
		require.Contains(t, out, "2 received")
		require.Contains(t, out, "pings up 2 down 2")
		// Neither a raw nor a datagram socket: refused, counted, and said
		// once at start.
		out, err = ping("1 0")
		require.Error(t, err, "%s", out)
		require.Equal(t, 1, strings.Count(out, "pings to relayed destinations are refused"), "%s", out)
		require.Contains(t, out, "refused: host_error 2")
	})
	t.Run("privileged port refused", func(t *testing.T) {
		c := r.cmd(r.bin, "tun", "-p", "80:80", "--", "true")
		c.Stderr = nil
		out, err := c.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "CAP_NET_BIND_SERVICE")
	})
	t.Run("port forward", func(t *testing.T) {
		port := freePort(t)
		c := r.tun([]string{"-p", fmt.Sprintf("127.0.0.1:%d:7000", port)}, "echo-server", "7000")
		stdin, err := c.StdinPipe()
		require.NoError(t, err)
		stdout, err := c.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, c.Start())
		defer func() {
			stdin.Close()
			c.Wait()
		}()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		requireEcho(t, fmt.Sprintf("127.0.0.1:%d", port))
	})
	t.Run("attach to pid", func(t *testing.T) {
		needTool(t, "unshare", "util-linux")
		needTool(t, "nsenter", "util-linux")
		holder := r.cmd("unshare", "-rn", "sleep", "600")
		require.NoError(t, holder.Start())
		defer func() {
			holder.Process.Kill()
			holder.Wait()
		}()
		// unshare executes sleep in the same process once the namespaces
		// exist: wait for that.
		pid := holder.Process.Pid
		require.Eventually(t, func() bool {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			return string(b) == "sleep\n"
		}, 10*time.Second, 20*time.Millisecond)
		n := sized(8 << 20)
		out, err := r.tun(append([]string{"-pid", strconv.Itoa(pid)}, flags...), "fetch", fmt.Sprintf("http://%s/bytes/%d", gw(hs.http), n)).Output()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s %d\n", patternSum(n), n), string(out))
		// The device went with ustack: the namespace is the holder's again.
		out, err = exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ip", "-o", "link").Output()
		require.NoError(t, err)
		require.NotContains(t, string(out), sandbox.DefaultDevice)
	})
}

// TestRootlessSupervisor drives `ustack tun` without root the way
// rootlesskit drives slirp4netns: -ready-fd, the API socket's
// add/list/remove_hostfwd while traffic flows, and -exit-fd.
func TestRootlessSupervisor(t *testing.T) {
	r := setupRootless(t)
	sockDir := filepath.Join(r.dir, "api")
	require.NoError(t, os.Mkdir(sockDir, 0o700))
	require.NoError(t, os.Chown(sockDir, int(r.cred.Uid), int(r.cred.Gid)))
	sock := filepath.Join(sockDir, "api.sock")

	readyR, readyW, err := os.Pipe()
	require.NoError(t, err)
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	require.NoError(t, err)
	defer exitW.Close()
	c := r.tun([]string{"-ready-fd", "3", "-exit-fd", "4", "-api-socket", sock}, "echo-server", "7000")
	c.ExtraFiles = []*os.File{readyW, exitR}
	stdin, err := c.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	require.NoError(t, c.Start())
	readyW.Close()
	exitR.Close()
	waited := make(chan struct{})
	go func() { c.Wait(); close(waited) }()
	defer func() {
		select {
		case <-waited:
		default:
			c.Process.Kill()
			<-waited
		}
	}()

	ready, err := io.ReadAll(readyR)
	require.NoError(t, err)
	require.Equal(t, "1", string(ready), "-ready-fd writes 1 and closes")

	// ustack serves the sandbox from a confined relay process
	// (-seccomp, the default), which is ready by now.
	relay := relayOf(t, c.Process.Pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", relay))
	require.NoError(t, err)
	require.Contains(t, string(b), "Seccomp:\t2", "the relay is not under its seccomp filter")
	require.Contains(t, string(b), "NoNewPrivs:\t1")
	requireEmptyRoot(t, relay)

	// As rootlesskit's slirp4netns port driver calls the API: one
	// connection per request, the request JSON-encoded, the write side
	// shut down, the whole answer read and decoded into return or error.
	type apiReply struct {
		Return map[string]any `json:"return,omitempty"`
		Error  map[string]any `json:"error,omitempty"`
	}
	type addArgs struct {
		Proto     string `json:"proto"`
		HostAddr  string `json:"host_addr"`
		HostPort  int    `json:"host_port"`
		GuestAddr string `json:"guest_addr"`
		GuestPort int    `json:"guest_port"`
	}
	type removeArgs struct {
		ID int `json:"id"`
	}
	api := func(execute string, args any) apiReply {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
		require.NoError(t, err)
		defer conn.Close()
		req := map[string]any{"execute": execute}
		if args != nil {
			req["arguments"] = args
		}
		require.NoError(t, json.NewEncoder(conn).Encode(req))
		require.NoError(t, conn.CloseWrite())
		b, err := io.ReadAll(conn)
		require.NoError(t, err)
		var rep apiReply
		require.NoError(t, json.Unmarshal(b, &rep), "%s", b)
		return rep
	}
	port := freePort(t)
	rep := api("add_hostfwd", addArgs{Proto: "tcp", HostAddr: "127.0.0.1", HostPort: port, GuestAddr: sandbox.DefaultAddr4.Addr().String(), GuestPort: 7000})
	require.Empty(t, rep.Error)
	require.Equal(t, map[string]any{"id": float64(1)}, rep.Return)

	// The echo server inside may not listen yet: retry the first connect.
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer conn.Close()
		conn.Write([]byte("x"))
		conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)
	// A connection held open across the list and the remove.
	held, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer held.Close()

	rep = api("list_hostfwd", nil)
	require.Empty(t, rep.Error)
	require.Equal(t, map[string]any{"entries": []any{map[string]any{
		"id": float64(1), "proto": "tcp", "host_addr": "127.0.0.1", "host_port": float64(port),
		"guest_addr": sandbox.DefaultAddr4.Addr().String(), "guest_port": float64(7000),
	}}}, rep.Return)

	rep = api("remove_hostfwd", removeArgs{ID: 1})
	require.Empty(t, rep.Error)
	require.Equal(t, map[string]any{}, rep.Return)
	rep = api("remove_hostfwd", removeArgs{ID: 1})
	require.Contains(t, rep.Error["desc"], "bad request: remove_hostfwd: bad arguments.id")
	rep = api("list_hostfwd", nil)
	require.Equal(t, map[string]any{"entries": []any{}}, rep.Return)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "the host port is closed once the forward is removed")
	// The held connection still flows.
	msg := []byte("still flowing")
	_, err = held.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(held, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)

	rep = api("nonsense", nil)
	require.Contains(t, rep.Error["desc"], "bad request: unknown execute")

	// Closing the exit fd ends ustack (and the command, with SIGTERM).
	exitW.Close()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("ustack tun did not exit after its -exit-fd closed")
	}
	_, err = os.Stat(sock)
	require.True(t, os.IsNotExist(err), "the API socket is removed")
}

// freePort is a TCP port on 127.0.0.1 free a moment ago.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// requireEcho sends through a TCP echo at addr and checks the answer.
func requireEcho(t *testing.T, addr string) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	defer c.Close()
	msg := bytes.Repeat([]byte("rootless "), 10000)
	go c.Write(msg)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
}

// TestSandboxTunConfinedAsRoot runs `ustack tun` as root, as CI builds it
// (cgo linked), and checks that its relay process runs as nobody with an
// empty root, and every thread of it is under the seccomp filter and
// holds no capability but CAP_NET_BIND_SERVICE, in every set, the
// bounding set included; and that a ping relayed through the raw socket
// opened before the drop still flows without CAP_NET_RAW.
func TestSandboxTunConfinedAsRoot(t *testing.T) {
	needPrivilege(t, "ustack tun as root", nsProbe())
	needTool(t, "ping", "iputils-ping")
	lo, err := netlink.LinkByName("lo")
	require.NoError(t, err)
	a, err := netlink.ParseAddr("198.18.99.78/32")
	require.NoError(t, err)
	require.NoError(t, netlink.AddrAdd(lo, a))
	defer netlink.AddrDel(lo, a)

	c := exec.Command(buildUstack(t), "tun", "-stats", "--", "sh", "-c", "read x; ping -c 2 -W 5 198.18.99.78")
	stdin, err := c.StdinPipe()
	require.NoError(t, err)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	require.NoError(t, c.Start())
	waited := false
	defer func() {
		if !waited {
			c.Process.Kill()
			c.Wait()
		}
	}()
	// The relay process serves the sandbox; it is confined before it
	// reports ready, which ustack tun waits for before it runs CMD.
	pid := relayOf(t, c.Process.Pid)
	var b []byte
	require.Eventually(t, func() bool {
		b, _ = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		return strings.Contains(string(b), "Seccomp:\t2")
	}, 20*time.Second, 20*time.Millisecond, "the relay is not under its seccomp filter")
	for _, want := range []string{"Seccomp:\t2", "Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534", "Groups:\t \n"} {
		require.Contains(t, string(b), want, "the relay, as root, runs as nobody under its filter")
	}
	requireEmptyRoot(t, pid)

	const kept = uint64(1) << 10 // CAP_NET_BIND_SERVICE
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	require.NoError(t, err)
	require.NotEmpty(t, tasks)
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended meanwhile
		}
		sets := 0
		for _, line := range strings.Split(string(b), "\n") {
			name, val, ok := strings.Cut(line, ":\t")
			if !ok || !strings.HasPrefix(name, "Cap") && name != "Seccomp" && name != "NoNewPrivs" {
				continue
			}
			switch name {
			case "Seccomp":
				require.Equal(t, "2", val, "%s: not under the filter", task)
			case "NoNewPrivs":
				require.Equal(t, "1", val, "%s: no_new_privs unset", task)
			default:
				v, err := strconv.ParseUint(val, 16, 64)
				require.NoError(t, err)
				require.Zero(t, v&^kept, "%s: %s %016x: capabilities kept after confinement", task, name, v)
				sets++
			}
		}
		require.Equal(t, 5, sets, "%s: capability sets", task)
	}
	t.Logf("%d threads of ustack tun's relay, each at most %016x", len(tasks), kept)

	stdin.Write([]byte("go\n"))
	stdin.Close()
	err = c.Wait()
	waited = true
	require.NoError(t, err, "%s", out.String())
	require.Contains(t, out.String(), "2 received")
	require.Contains(t, out.String(), "pings up 2 down 2")
}

// relayOf finds the relay process of the ustack command pid: its child
// that ps shows as "... relay", waiting for it to start.
func relayOf(t *testing.T, pid int) int {
	t.Helper()
	var relay int
	require.Eventually(t, func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			if err != nil {
				continue
			}
			i := bytes.LastIndexByte(stat, ')')
			f := strings.Fields(string(stat[i+1:]))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) && strings.HasSuffix(string(bytes.TrimRight(cmdline, "\x00")), " relay") {
				relay = p
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no relay process under %d", pid)
	return relay
}

// requireEmptyRoot checks, from outside, what the confined relay pid
// sees as its filesystem: an empty root with a /proc of its own.
func requireEmptyRoot(t *testing.T, pid int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/", pid))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"proc"}, names, "the relay's root holds only its own /proc")
}
