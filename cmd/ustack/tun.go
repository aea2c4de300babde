package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"

	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/sched"
)

// listFlag collects a repeatable flag; each use may also be a
// comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

// sandboxRun is one run of the sandbox as a command: the sandbox's
// configuration and what the command does around it. Every front end
// (ustack tun, and the slirp4netns and pasta command lines) parses its
// command line into one and calls run: the front ends only parse.
type sandboxRun struct {
	name string // the command's name in messages: "ustack tun", ...
	cfg  sandbox.Config
	// args is CMD [ARGS...] to run in the sandbox; none: serve until a
	// signal or exitFD.
	args []string
	// readyFD gets "1" and is closed once the sandbox's network is up;
	// exitFD ends the run once readable or closed (slirp4netns's -r and
	// -e). -1: none.
	readyFD, exitFD int
	// apiSocket serves slirp4netns's API; metrics Prometheus metrics;
	// stats prints the relay's counters at the end.
	apiSocket, metrics string
	stats              bool
	// confine confines the relay once serving (Sandbox.Confine);
	// confineOff says how to turn that off, for messages.
	confine    bool
	confineOff string
	// procs is GOMAXPROCS (0: Go's default), unless $GOMAXPROCS is set
	// and procsSet is not.
	procs    int
	procsSet bool
	// cpuProfile and traceFile profile the run ("": none).
	cpuProfile, traceFile string
	// pcap is the file a capture of the sandbox's traffic goes to ("":
	// none; Config.Capture).
	pcap string
	// sysmonTick runs the relay with the runtime's monitor on its slow
	// tick (execWithSysmonTick).
	sysmonTick bool
	// quitNetNS and quitPID, for a confined run, end the relay once the
	// namespace file at quitNetNS is deleted or process quitPID (> 0)
	// ends, as pasta ends with the namespace it serves (openNSWatch).
	quitNetNS string
	quitPID   int
	// detach, for a confined run without CMD: once the relay is ready
	// this process exits 0 and the relay serves on alone, as pasta forks
	// into the background (relayOptions.detach).
	detach bool
	// pidFile, if set, receives the PID of the process that serves once
	// it is ready: the relay's when detached, this process's otherwise
	// (pasta's --pid).
	pidFile string
	// quiet leaves out the line saying what is served.
	quiet bool
	// wg, if not nil, is the WireGuard tunnel the sandbox's flows leave
	// through (-wg).
	wg *sandboxWG
	// warnings are said at start: what is allowed but unwise.
	warnings []string
}

func tunMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	r, status, ok := parseTun(args, stderr)
	if !ok {
		return status
	}
	return r.run(stdin, stdout, stderr)
}

// parseTun parses ustack tun's command line. When it reports !ok the
// command returns status at once (0 after -h, 2 for a bad command line,
// which it has reported). What the flags say about the sandbox is checked
// by Config.Check alone; parseTun checks only what is not the sandbox's.
func parseTun(args []string, stderr io.Writer) (r sandboxRun, status int, ok bool) {
	fs := flag.NewFlagSet("ustack tun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	r = sandboxRun{name: "ustack tun", confineOff: "-seccomp=false"}
	d := &r.cfg
	var allow, deny, fwds listFlag
	var (
		nsPath     = fs.String("netns", "", "serve an existing network namespace (e.g. /var/run/netns/NAME) instead of creating one")
		pid        = fs.Int("pid", 0, "serve the network namespace of this process, as slirp4netns does")
		host       = fs.Bool("host", false, "serve the device in this process's own network namespace, as tun2socks does: no namespace is made and no route changed (route through the device yourself, and keep the relay's sockets out of it with -interface or -fwmark); without root the device must exist, be yours and be used as it is (-no-configure)")
		iface      = fs.String("interface", "", "bind every host socket the relay opens (TCP, UDP, ICMP, DNS, the proxy's) to this interface (SO_BINDTODEVICE)")
		fwmark     = fs.Uint("fwmark", 0, "mark every host socket the relay opens with this firewall mark (SO_MARK; root), for a routing rule that keeps them off a route through the device; with -wg, wireguard-go's (its FwMark)")
		wgFile     = fs.String("wg", "", "send every flow of the sandbox through a WireGuard tunnel instead of host sockets: a configuration file in wg-quick's format whose peer is the exit (AllowedIPs 0.0.0.0/0, ::/0), served by wireguard-go in ustack with no TUN device and no root; DNS queries go through it to the file's DNS server (or -dns-upstream); the sandbox reaches nothing else, the host's loopback included")
		readyFD    = fs.Int("ready-fd", -1, "write \"1\" to this descriptor and close it once the sandbox's network is up (slirp4netns's --ready-fd)")
		exitFD     = fs.Int("exit-fd", -1, "exit (stopping CMD with SIGTERM) once this descriptor is readable or closed (slirp4netns's --exit-fd)")
		confine    = fs.Bool("seccomp", true, "once serving (and CMD started), confine ustack: a seccomp allow-list (a denied system call fails with EPERM: no execve, no fork, no raw sockets), no_new_privs, capabilities dropped")
		apiSocket  = fs.String("api-socket", "", "serve slirp4netns's API (add_hostfwd, list_hostfwd, remove_hostfwd) on this unix socket")
		userns     = fs.String("userns", "", "without root, with -netns or -pid: the user namespace to join (default: the one owning the network namespace)")
		usernsMap  = fs.String("userns-map", "", "without root: how the new user namespace maps ids: self (your uid and gid are root inside) or auto (also your /etc/subuid ranges, via newuidmap; the default where available)")
		device     = fs.String("device", "", "name of the device inside the namespace (default "+sandbox.DefaultDevice+", or "+sandbox.DefaultTAPDevice+" with -tap)")
		tap        = fs.Bool("tap", false, "a TAP device (Ethernet frames, as slirp4netns and pasta give containers) instead of TUN: ustack answers ARP and neighbour discovery and sends router advertisements")
		noConfig   = fs.Bool("no-configure", false, "attach to (or create) the device and leave its addresses, routes, MTU and link state to its creator, as RootlessKit configures its tap0")
		pcapFile   = fs.String("pcap", "", "write a capture of the sandbox's traffic to this file (pcap, as Wireshark and tcpdump read)")
		addr4      = fs.String("addr", sandbox.DefaultAddr4.String(), "the sandbox's IPv4 address")
		gw4        = fs.String("gw", sandbox.DefaultGateway4.String(), "the gateway: ustack's address, and the host's loopback with -allow-host-loopback")
		dns4       = fs.String("dns", sandbox.DefaultDNS4.String(), "ustack's DNS address, relayed to the host's resolver")
		addr6      = fs.String("addr6", sandbox.DefaultAddr6.String(), "the sandbox's IPv6 address")
		gw6        = fs.String("gw6", sandbox.DefaultGateway6.String(), "the IPv6 gateway")
		dns6       = fs.String("dns6", sandbox.DefaultDNS6.String(), "ustack's IPv6 DNS address")
		noIPv6     = fs.Bool("no-ipv6", false, "no IPv6 in the sandbox")
		mtu        = fs.Uint("mtu", sandbox.DefaultMTU, "MTU of the TUN device")
		offload    = fs.Bool("offload", true, "virtio-net offloads (checksum, TSO, USO) on the TUN device")
		queues     = fs.Int("queues", 1, "TUN device queues, each with its own receive goroutine")
		qdisc      = fs.String("qdisc", sched.None, "queueing discipline towards the sandbox: "+strings.Join(sched.Names(), ", "))
		busyPoll   = fs.String("busypoll", "off", "busy polling: off, on:<us>, spin:<us>, adaptive[:<us>]")
		upstream   = fs.String("dns-upstream", "", "resolver for DNS queries, ADDR[:PORT] (default: the host's first nameserver); off turns the DNS relay off; with -proxy (and UDP refused) asked over TCP through the proxy")
		proxyURL   = fs.String("proxy", "", "relay every TCP flow through this proxy: "+sandbox.ProxyForms+"; the -allow/-deny policy still applies to the destination the sandbox asked for")
		proxyUDP   = fs.String("proxy-udp", "refuse", "UDP with -proxy, which carries none: refuse (counted as unsupported; the safe choice when all traffic must leave through the proxy; DNS queries still go over TCP through it) or direct (to host sockets, outside the proxy)")
		resolv     = fs.Bool("resolv-conf", true, "give CMD a private /etc/resolv.conf naming the DNS address")
		hostLoop   = fs.Bool("allow-host-loopback", false, "let the sandbox reach the host's loopback (127.0.0.1, ::1) through the gateway address")
		maxFlows   = fs.Int("max-flows", forward.DefaultMaxFlows, "most flows at once, all protocols (-1: no limit)")
		maxTCP     = fs.Int("max-tcp", forward.DefaultMaxTCP, "most TCP connections at once (-1: no limit)")
		maxUDP     = fs.Int("max-udp", forward.DefaultMaxUDP, "most UDP mappings at once (-1: no limit)")
		maxHalf    = fs.Int("max-half-open", forward.DefaultMaxHalfOpen, "most TCP handshakes that count at once: those to destinations that have not shown they answer, and any slower than a second (a burst to a live server never counts); one destination holds a quarter of them, one source half (-1: no limit)")
		tcpBuf     = fs.Int("tcp-buffer", sandbox.DefaultTCPBuffer, "most bytes gVisor buffers per direction of one TCP flow; each flow reserves twice this against -memory-budget")
		budget     = fs.Int64("memory-budget", forward.DefaultMemoryBudget, "most bytes of buffers open flows may reserve (-1: no limit)")
		udpIdle    = fs.Duration("udp-timeout", forward.DefaultUDPIdleTimeout, "a UDP mapping ends after this long without traffic")
		connTO     = fs.Duration("connect-timeout", sandbox.DefaultConnectTimeout, "limit on a host-side TCP connect")
		metricsAt  = fs.String("metrics", "", "serve Prometheus metrics on this host address, e.g. 127.0.0.1:9100")
		printStats = fs.Bool("stats", false, "print the relay's counters on exit")
		procs      = fs.Int("procs", 1, "CPUs ustack runs its relay on at once (GOMAXPROCS); 0: Go's default (every CPU, or $GOMAXPROCS). 1, as slirp4netns and pasta are single-threaded, spares the Go scheduler's cross-CPU thread wake-ups (docs/results.md measures it)")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of ustack (not of CMD) to this file")
		traceFile  = fs.String("trace", "", "write an execution trace of ustack (go tool trace) to this file")
		sysmonTick = fs.Bool("sysmon-tick", true, "keep the Go runtime's monitor thread on its slow tick while ustack is idle, instead of asleep until the next system call wakes it (ustack executes itself again with GODEBUG="+sysmonTickSetting+"; on a machine up more than 24.8 days the runtime writes one scheduler trace line to stderr at start): a relay idle between every request and its answer spares a thread wake-up per message (docs/results.md measures it)")
	)
	fs.Var(&allow, "allow", "CIDR the sandbox may reach; repeatable; with any, nothing else is reachable")
	fs.Var(&deny, "deny", "CIDR the sandbox may not reach; repeatable; wins over -allow and -allow-host-loopback")
	fs.Var(&fwds, "p", "port forward [HOSTIP:]HOSTPORT:PORT[/udp] from the host into the sandbox (HOSTIP defaults to 127.0.0.1); repeatable")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: ustack tun [flags] -- CMD [ARGS...]
       ustack tun [flags] -netns PATH | -pid PID [-- CMD [ARGS...]]
       ustack tun [flags] -host [-device NAME] [-- CMD [ARGS...]]

Gives a network namespace its network through ustack: the namespace's only
route is a TUN device served by ustack in this process, which relays every
flow to host sockets. With CMD, runs it in a new namespace (or the given
one) and exits with its status; without, serves until SIGINT or SIGTERM.

Flags:
`)
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return r, status, false
	}
	usage := func(format string, a ...any) (sandboxRun, int, bool) {
		fmt.Fprintf(stderr, "ustack tun: "+format+"\n", a...)
		return r, 2, false
	}
	r.args = fs.Args()
	switch {
	case *nsPath != "" && *pid != 0:
		return usage("give -netns or -pid, not both")
	case *pid < 0:
		return usage("-pid %d: not a process ID", *pid)
	case *pid > 0:
		*nsPath = fmt.Sprintf("/proc/%d/ns/net", *pid)
	}
	if *nsPath == "" && !*host && len(r.args) == 0 {
		return usage("nothing to run: give -- CMD [ARGS...], or -netns PATH or -pid PID to serve a namespace, or -host to serve a device in this one")
	}
	if *fwmark > 1<<32-1 {
		return usage("-fwmark %d: a mark is 32 bits", *fwmark)
	}
	if *procs < 0 {
		return usage("-procs %d: want a count of CPUs, or 0 for Go's default", *procs)
	}
	var err error
	parse := func(name, v string, bits int) netip.Prefix {
		if err != nil {
			return netip.Prefix{}
		}
		var p netip.Prefix
		if p, err = netip.ParsePrefix(v); err != nil {
			err = fmt.Errorf("%s %q: want a CIDR such as %s", name, v, map[int]string{4: "198.18.0.100/24", 6: "fd00:198:18::100/64"}[bits])
		}
		return p
	}
	parseAddr := func(name, v string) netip.Addr {
		if err != nil {
			return netip.Addr{}
		}
		var a netip.Addr
		if a, err = netip.ParseAddr(v); err != nil {
			err = fmt.Errorf("%s %q: not an IP address", name, v)
		}
		return a
	}
	d.Addr4, d.Gateway4, d.DNS4 = parse("-addr", *addr4, 4), parseAddr("-gw", *gw4), parseAddr("-dns", *dns4)
	d.Addr6, d.Gateway6, d.DNS6 = parse("-addr6", *addr6, 6), parseAddr("-gw6", *gw6), parseAddr("-dns6", *dns6)
	for _, l := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{{"-allow", allow, &d.Allow}, {"-deny", deny, &d.Deny}} {
		for _, v := range l.in {
			if p := parse(l.name, v, 4); err == nil {
				*l.out = append(*l.out, p.Masked())
			}
		}
	}
	if err != nil {
		return usage("%v", err)
	}
	for _, v := range fwds {
		f, err := sandbox.ParsePortForward(v)
		if err != nil {
			return usage("-p: %v", err)
		}
		d.PortForwards = append(d.PortForwards, f)
	}
	switch *upstream {
	case "":
	case "off":
		d.NoDNS = true
	default:
		ap, err := netip.ParseAddrPort(*upstream)
		if err != nil {
			a, aerr := netip.ParseAddr(*upstream)
			if aerr != nil {
				return usage("-dns-upstream %q: want ADDR, ADDR:PORT, [ADDR6]:PORT or off", *upstream)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		d.DNSUpstream = ap
	}
	switch *proxyUDP {
	case "refuse":
	case "direct":
		d.ProxyUDPDirect = true
	default:
		return usage("-proxy-udp %q: want refuse or direct", *proxyUDP)
	}
	if d.BusyPoll, err = poll.Parse(*busyPoll); err != nil {
		return usage("-busypoll: %v", err)
	}
	d.NetNS, d.Device, d.NoIPv6, d.MTU, d.NoOffload, d.Queues, d.Qdisc = *nsPath, *device, *noIPv6, uint32(*mtu), !*offload, *queues, *qdisc
	d.TAP, d.NoConfigure = *tap, *noConfig
	d.Host, d.Interface, d.Mark = *host, *iface, uint32(*fwmark)
	if d.NoConfigure && !setFlag(fs, "mtu") {
		d.MTU = 0 // the device's own
	}
	d.ResolvConf, d.AllowHostLoopback, d.Proxy = *resolv, *hostLoop, *proxyURL
	d.UserNS, d.UsernsMap = *userns, *usernsMap
	d.MaxFlows, d.MaxTCP, d.MaxUDP, d.MaxHalfOpen, d.TCPBuffer, d.MemoryBudget = *maxFlows, *maxTCP, *maxUDP, *maxHalf, *tcpBuf, *budget
	d.UDPIdleTimeout, d.ConnectTimeout = *udpIdle, *connTO
	if *wgFile != "" {
		var warning string
		if r.wg, warning, err = parseTunWG(*wgFile, d, func(name string) bool { return setFlag(fs, name) }); err != nil {
			return usage("%v", err)
		}
		if warning != "" {
			r.warnings = append(r.warnings, warning)
		}
	}
	if err := d.Check(); err != nil {
		return usage("%v", err)
	}
	r.readyFD, r.exitFD, r.apiSocket, r.metrics, r.stats = *readyFD, *exitFD, *apiSocket, *metricsAt, *printStats
	r.confine, r.procs, r.procsSet = *confine, *procs, setFlag(fs, "procs")
	r.cpuProfile, r.traceFile, r.sysmonTick = *cpuProfile, *traceFile, *sysmonTick
	r.pcap = *pcapFile
	return r, 0, true
}

// run runs the sandbox: builds it, serves it (running CMD in it, if
// given), and returns the exit status: CMD's, or 0 once told to stop, or
// 1 if the sandbox failed. Confined (the default), the sandbox is served
// by a relay process of its own (startRelay), isolated and confined,
// while this process keeps the namespace, runs CMD and passes signals
// on; unconfined, this process serves it.
func (r *sandboxRun) run(stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, r.name+": "+format+"\n", a...)
		return 1
	}
	if r.procs > 0 && (r.procsSet || os.Getenv("GOMAXPROCS") == "") {
		// An explicit $GOMAXPROCS wins over the default, not over the flag.
		runtime.GOMAXPROCS(r.procs)
	}
	if r.sysmonTick && !r.confine {
		// Before anything is created: the command line was checked,
		// and is parsed again after the exec. A confined run's relay
		// is started with the setting instead.
		if err := execWithSysmonTick(); err != nil {
			fmt.Fprintf(stderr, "%s: the runtime monitor's slow tick: execute again: %v\n", r.name, err)
		}
	}

	// Signals arrive from here on: a terminal's Ctrl-C reaches CMD itself
	// (same process group), SIGTERM is passed on, and without CMD either
	// one ends the service.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	for _, w := range r.warnings {
		fmt.Fprintf(stderr, "%s: %s\n", r.name, w)
	}
	if r.wg != nil && !r.quiet {
		fmt.Fprintf(stderr, "%s: %s\n", r.name, r.wg.Note)
	}
	var sv server
	var err error
	if r.confine {
		sv, err = r.startConfined(stderr)
	} else {
		sv, err = r.startInProcess(stderr)
	}
	if err != nil {
		return fail("%v", err)
	}
	if r.detach {
		return r.release(sv, stderr)
	}
	defer sv.stop()
	// The descriptors of the caller's contract are this process's alone,
	// not CMD's or a relay's.
	for _, fd := range []int{r.exitFD, r.readyFD} {
		if fd >= 0 {
			syscall.CloseOnExec(fd)
		}
	}
	// The exit descriptor is a contract between processes (a supervisor's
	// lifetime is the descriptor's), so it lives here and not in package
	// sandbox: a program embedding the sandbox owns it and calls Close.
	exitc := make(chan os.Signal, 1) // SIGTERM, when the exit descriptor fires
	if r.exitFD >= 0 {
		// Non-blocking, so that the runtime's poller waits for it and
		// closing f when run returns ends the reader.
		if err := syscall.SetNonblock(r.exitFD, true); err != nil {
			return fail("exit descriptor %d: %v: give an open descriptor, such as a pipe's read end", r.exitFD, err)
		}
		f := os.NewFile(uintptr(r.exitFD), "exit-fd")
		done := make(chan struct{})
		defer func() {
			f.Close()
			<-done
		}()
		go func() {
			defer close(done)
			if _, err := f.Read(make([]byte, 1)); errors.Is(err, os.ErrClosed) {
				return // run is returning
			}
			exitc <- syscall.SIGTERM
		}()
	}
	if r.readyFD >= 0 {
		f := os.NewFile(uintptr(r.readyFD), "ready-fd")
		_, err := f.Write([]byte("1"))
		f.Close()
		if err != nil {
			return fail("ready descriptor %d: %v", r.readyFD, err)
		}
	}
	if err := r.writePIDFile(os.Getpid()); err != nil {
		return fail("%v", err)
	}
	if len(r.args) == 0 {
		r.banner(stderr, sv)
		select {
		case <-sigs:
		case <-exitc:
		case <-sv.failed():
			err := sv.err()
			if err == nil && r.quitNetNS == "" && r.quitPID == 0 {
				err = errors.New("the relay ended (told to stop by someone else)")
			}
			if err != nil {
				return fail("%v", err)
			}
			// The relay ended by itself, cleanly: the namespace it
			// watched is gone.
		}
		return 0
	}
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	done := make(chan struct{})
	var proc *os.Process
	started := make(chan struct{})
	go func() {
		defer close(done)
		err = sv.runCommand(cmd, func(p *os.Process) { proc = p; close(started) })
	}()
	relayFailed, died := sv.failed(), false
	for {
		select {
		case s := <-exitc:
			exitc = nil // once
			select {
			case <-started:
				proc.Signal(s)
			default:
			}
			continue
		case s := <-sigs:
			select {
			case <-started:
				if s != os.Interrupt {
					proc.Signal(s)
				}
			default:
			}
			continue
		case <-relayFailed:
			// The sandbox has no network any more: stop CMD.
			relayFailed, died = nil, true
			why := sv.err()
			if why == nil {
				why = errors.New("the relay ended")
			}
			fmt.Fprintf(stderr, "%s: %v: stopping %s\n", r.name, why, r.args[0])
			select {
			case <-started:
				proc.Signal(syscall.SIGTERM)
			default:
			}
			continue
		case <-done:
		}
		break
	}
	if died {
		return 1
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	default:
		fmt.Fprintf(stderr, "%s: %s: %v\n", r.name, r.args[0], err)
		return 127
	}
}

// banner says what is served, unless quiet.
func (r *sandboxRun) banner(w io.Writer, sv server) {
	if r.quiet {
		return
	}
	dns := "none"
	if !r.cfg.NoDNS && r.cfg.DNS4.IsValid() && !r.cfg.DNS4.IsUnspecified() {
		dns = r.cfg.DNS4.String()
	}
	where := r.cfg.NetNS
	if r.cfg.Host {
		where = "this network namespace"
	}
	fmt.Fprintf(w, "%s: serving %s on %s (%v, gateway %v, DNS %s)\n", r.name, where, sv.device(), r.cfg.Addr4, r.cfg.Gateway4, dns)
}

// writePIDFile writes pid to the run's PID file, if it has one.
func (r *sandboxRun) writePIDFile(pid int) error {
	if r.pidFile == "" {
		return nil
	}
	if err := os.WriteFile(r.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("PID file: %w", err)
	}
	return nil
}

// release ends a detached run once its relay is ready: the PID file
// names the relay, which serves on alone, and this process exits 0.
func (r *sandboxRun) release(sv server, stderr io.Writer) int {
	c, ok := sv.(*confined)
	if !ok {
		sv.stop()
		fmt.Fprintf(stderr, "%s: only a confined sandbox is served by a process of its own, which can go on alone\n", r.name)
		return 1
	}
	if err := r.writePIDFile(c.pid()); err != nil {
		c.stop()
		fmt.Fprintf(stderr, "%s: %v\n", r.name, err)
		return 1
	}
	r.banner(stderr, sv)
	c.release()
	return 0
}

// server is what serves a run's sandbox: this process (startInProcess)
// or a confined relay process (startConfined).
type server interface {
	// device names the sandbox's device.
	device() string
	// runCommand runs cmd in the sandbox's namespace and waits for it.
	runCommand(cmd *exec.Cmd, started func(*os.Process)) error
	// failed is closed if serving stopped by itself (the relay ended);
	// err says why.
	failed() <-chan struct{}
	err() error
	// stop stops serving and writes the relay's counters if asked.
	stop()
}

// inProcess serves the sandbox in this process, unconfined.
type inProcess struct {
	r      *sandboxRun
	sb     *sandbox.Sandbox
	stderr io.Writer
	wg     *device.Device // -wg's; nil without
	undo   []func()       // in reverse order at stop
}

func (r *sandboxRun) startInProcess(stderr io.Writer) (sv server, err error) {
	p := &inProcess{r: r, stderr: stderr}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	stopProfiles, err := startProfiles(r.cpuProfile, r.traceFile)
	if err != nil {
		return nil, err
	}
	p.undo = append(p.undo, stopProfiles)
	cfg := r.cfg
	if r.pcap != "" {
		f, err := os.Create(r.pcap)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		p.undo = append(p.undo, func() { f.Close() })
		cfg.Capture = f
	}
	if r.wg != nil {
		dev, err := r.wg.open(&cfg, r.name, stderr)
		if err != nil {
			return nil, err
		}
		p.wg = dev
		p.undo = append(p.undo, dev.Close) // after the sandbox, whose flows it carries
	}
	sb, err := sandbox.New(&cfg)
	if err != nil {
		return nil, err
	}
	p.sb = sb
	for _, w := range sb.Warnings() {
		fmt.Fprintf(stderr, "%s: %s\n", r.name, w)
	}
	if r.metrics != "" {
		m, err := metrics.Serve(r.metrics, metrics.NewFunc(sb.Metrics()), metrics.NewStack(sb.Stack()))
		if err != nil {
			return nil, err
		}
		p.undo = append(p.undo, func() { m.Close() })
	}
	if r.apiSocket != "" {
		if err := sb.ServeAPI(r.apiSocket); err != nil {
			return nil, fmt.Errorf("API socket: %w", err)
		}
	}
	return p, nil
}

func (p *inProcess) device() string          { return p.sb.Device() }
func (p *inProcess) failed() <-chan struct{} { return nil }
func (p *inProcess) err() error              { return nil }

func (p *inProcess) runCommand(cmd *exec.Cmd, started func(*os.Process)) error {
	return p.sb.Run(cmd, started)
}

func (p *inProcess) stop() {
	if p.sb != nil {
		if err := p.sb.Close(); err != nil {
			fmt.Fprintf(p.stderr, "%s: close: %v\n", p.r.name, err)
		}
		if p.r.stats {
			writeTunStats(p.stderr, p.r.name, p.sb.Stats())
			writeWGPeers(p.stderr, p.r.name, p.wg)
		}
		p.sb = nil
	}
	for i := len(p.undo) - 1; i >= 0; i-- {
		p.undo[i]()
	}
	p.undo = nil
}

// writeTunStats prints the relay's counters, one per line, each starting
// with the command's name.
func writeTunStats(w io.Writer, name string, st sandbox.Stats) {
	fmt.Fprintf(w, "%s: tcp flows %d (now %d), udp mappings %d (now %d), dns queries %d, port forwards %d (failed %d)\n",
		name, st.TCPOpened, st.TCPFlows, st.UDPOpened, st.UDPFlows, st.DNSQueries, st.PortForwardConns, st.PortForwardFailed)
	fmt.Fprintf(w, "%s: tcp bytes up %d down %d, udp datagrams up %d down %d (dropped %d), pings up %d down %d, connects failed %d, resets %d\n",
		name, st.TCPBytesUp, st.TCPBytesDown, st.UDPPacketsUp, st.UDPPacketsDown, st.UDPDropped, st.PingsUp, st.PingsDown, st.ConnectFailed, st.TCPResets)
	var refused []string
	for _, r := range forward.Reasons() {
		if n := st.Refused[r]; n > 0 {
			refused = append(refused, fmt.Sprintf("%s %d", r, n))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintf(w, "%s: refused: %s\n", name, strings.Join(refused, ", "))
	}
}

// startProfiles starts a CPU profile and an execution trace into the files
// named ("" for none); the returned func stops both and closes the files.
func startProfiles(cpuPath, tracePath string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, p := range []struct {
		flag, path string
		start      func(io.Writer) error
		end        func()
	}{
		{"-cpuprofile", cpuPath, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"-trace", tracePath, trace.Start, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", p.flag, err)
		}
		if err := p.start(f); err != nil {
			f.Close()
			stop()
			return nil, fmt.Errorf("%s: %w", p.flag, err)
		}
		stops = append(stops, func() { p.end(); f.Close() })
	}
	return stop, nil
}

// setFlag reports whether the command line gave the flag name.
func setFlag(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
