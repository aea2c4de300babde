package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/linkspec"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/serve"
	"github.com/ustack-dev/ustack/stack"
)

func serveMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ustack serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		stackName = fs.String("stack", "ustack", "the network stack: ustack (on -link), or kernel (the host's own sockets, for comparison: the same services and HTTP handler; the interfaces must have their addresses already, -addr optionally limits where it listens, and the ustack-only flags must be unset)")
		linkSpec  = fs.String("link", "", "the device: afpacket:IFACE (an existing interface) or tun:NAME (opened or created)")
		addrs     = fs.String("addr", "", "ustack's addresses, comma-separated CIDRs, e.g. 198.18.0.2/24,fd00::2/64")
		gws       = fs.String("gw", "", "default gateways, comma-separated, at most one per IP version")
		peer      = fs.String("peer-addr", "", "tun only: addresses for the kernel side of the device, comma-separated CIDRs")
		qdisc     = fs.String("qdisc", sched.None, "queueing discipline: "+strings.Join(sched.Names(), ", "))
		echo      = fs.Uint("echo", 7, "TCP and UDP echo port (0: off)")
		discard   = fs.Uint("discard", 9, "TCP and UDP discard port (0: off)")
		httpPort  = fs.Uint("http", 80, "HTTP port: /bytes/N and a status page (0: off)")
		metrics   = fs.String("metrics", "", "serve Prometheus metrics on this host address, e.g. 127.0.0.1:9100 (off by default)")
		queues    = fs.Int("queues", 1, "device queues (PACKET_FANOUT sockets or TUN queues), each with its own receive goroutine")
		offload   = fs.Bool("offload", true, "virtio-net header: checksum offload and GSO with the kernel")
		mtu       = fs.Uint("mtu", 0, "tun only: device MTU (0: the device's default)")
		busyPoll  = fs.String("busypoll", "off", "busy polling of readers: off, on:<us>, spin:<us> (ignores runnable goroutines; for comparison), adaptive[:<us>]")
		impair    = fs.String("impair", "none", "fault injection, e.g. loss=5%,dup=1%,reorder=1%,corrupt=0.1%,delay=1ms,jitter=100us,seed=1")
		cpuPath   = fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		tracePath = fs.String("trace", "", "write an execution trace of the whole run to this file (large: keep runs short)")
		procs     = fs.Int("procs", 0, "CPUs the server runs on at once (GOMAXPROCS); 0: each stack's default, 1 with ustack (fewer cross-CPU wake-ups between its receive, TCP and handler goroutines) and Go's (every CPU) with kernel, unless $GOMAXPROCS is set; docs/results.md has what each was measured to give")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ustack serve -link afpacket:IFACE|tun:NAME -addr CIDR[,CIDR] [flags]\n       ustack serve -stack kernel [-addr CIDR[,CIDR]] [flags]\n\nRuns a ustack host on a real interface with echo, discard and HTTP\nservices until SIGINT or SIGTERM; with -stack kernel, the same services\non the kernel's sockets.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ustack serve: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	for _, p := range []struct {
		name string
		v    uint
	}{{"-echo", *echo}, {"-discard", *discard}, {"-http", *httpPort}} {
		if p.v > 65535 {
			return usage("%s %d: a port is at most 65535", p.name, p.v)
		}
	}
	ports := serve.Ports{Echo: uint16(*echo), Discard: uint16(*discard), HTTP: uint16(*httpPort)}
	if *procs < 0 {
		return usage("-procs %d: want a count of CPUs, or 0 for the stack's default", *procs)
	}
	switch *stackName {
	case "ustack":
	case "kernel":
		var ustackOnly []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "link", "gw", "peer-addr", "qdisc", "queues", "offload", "mtu", "busypoll", "impair":
				ustackOnly = append(ustackOnly, "-"+f.Name)
			}
		})
		if len(ustackOnly) > 0 {
			return usage("-stack kernel: %s configure ustack; configure the kernel's interfaces with ip(8) instead", strings.Join(ustackOnly, ", "))
		}
		prefixes, err := parsePrefixes(*addrs)
		if err != nil {
			return usage("-addr %q: want comma-separated CIDRs such as 198.18.0.2/24", *addrs)
		}
		setProcs(*procs, 0)
		return runServe(&serve.Config{Kernel: true, Addrs: prefixes, Ports: ports, Metrics: *metrics}, *cpuPath, *tracePath, stderr)
	default:
		return usage("-stack %q: want ustack or kernel", *stackName)
	}
	if *linkSpec == "" {
		return usage("-link is required: afpacket:IFACE or tun:NAME")
	}
	spec, err := linkspec.Parse(*linkSpec)
	if err == nil && !spec.Device() {
		err = fmt.Errorf("link %q: a mem link joins two stacks in one process; serve needs a device", *linkSpec)
	}
	if err != nil {
		return usage("-link: %v (serve takes afpacket:IFACE or tun:NAME)", err)
	}
	prefixes, err := parsePrefixes(*addrs)
	if err != nil || len(prefixes) == 0 {
		return usage("-addr %q: want comma-separated CIDRs such as 198.18.0.2/24", *addrs)
	}
	peers, err := parsePrefixes(*peer)
	if err != nil {
		return usage("-peer-addr %q: want comma-separated CIDRs", *peer)
	}
	var gateways []netip.Addr
	for _, g := range splitList(*gws) {
		a, err := netip.ParseAddr(g)
		if err != nil {
			return usage("-gw %q: not an IP address", g)
		}
		gateways = append(gateways, a)
	}
	if !sched.Known(*qdisc) {
		return usage("%v", &sched.UnknownError{Name: *qdisc})
	}
	if *queues < 1 {
		return usage("-queues %d: must be at least 1", *queues)
	}
	if err := checkMTU(*mtu); err != nil {
		return usage("%v", err)
	}
	im, err := link.ParseImpairments(*impair)
	if err != nil {
		return usage("-impair: %v", err)
	}
	bp, err := poll.Parse(*busyPoll)
	if err != nil {
		return usage("-busypoll: %v", err)
	}
	ep, err := linkspec.Open(spec, &linkspec.Options{
		AFPacket: &afpacket.Options{Queues: *queues, NoOffload: !*offload},
		Tun:      &tun.Options{Queues: *queues, NoOffload: !*offload, MTU: uint32(*mtu), Addrs: peers},
		Impair:   im,
	})
	if err != nil {
		fmt.Fprintf(stderr, "ustack serve: %v\n", err)
		return 1
	}
	setProcs(*procs, 1)
	return runServe(&serve.Config{
		Endpoint: ep,
		Name:     spec.Name,
		Addrs:    prefixes,
		Gateways: gateways,
		Qdisc:    *qdisc,
		Stack:    &stack.Options{BusyPoll: bp, TCP: serveTCP()},
		Ports:    ports,
		Metrics:  *metrics,
	}, *cpuPath, *tracePath, stderr)
}

// serveSendBuffer is the send buffer each of serve's TCP connections
// starts with: 4 MiB, the most Linux's send-buffer autotuning gives a
// connection by default (tcp_wmem's maximum), which the kernel-socket
// server reaches in a bulk download. gVisor grows a send buffer only
// after a full one drained (to twice the congestion window, up to the
// stack's maximum), so ustack's starts at the stack's 1 MiB default.
// Measured with scripts/http.sh, 5 alternating runs each: ustack's
// download 1.26x as fast as with 1 MiB on 256 MiB, 1.14x on 2 GiB. That
// was before linkutil.GRO thinned ACKs; since, on a quiet machine, 1 MiB
// ran the same (1.00x on 256 MiB, 8 runs; 0.98x on 1 GiB, 4 runs).
const serveSendBuffer = 4 << 20

// serveTCP returns the stack's default TCP options with serve's send
// buffer.
func serveTCP() *stack.TCPOptions {
	o := stack.DefaultTCPOptions()
	o.SendBuffer.Default = max(o.SendBuffer.Default, serveSendBuffer)
	o.SendBuffer.Max = max(o.SendBuffer.Max, o.SendBuffer.Default)
	return &o
}

// setProcs sets GOMAXPROCS to procs, or with procs 0 to def (0: Go's
// default) unless $GOMAXPROCS is set: an explicit $GOMAXPROCS wins over
// the default, not over the flag.
func setProcs(procs, def int) {
	if procs == 0 && os.Getenv("GOMAXPROCS") == "" {
		procs = def
	}
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
}

// runServe serves cfg until SIGINT or SIGTERM, profiling into the files
// named ("" for none), and returns the exit status. It owns cfg.Endpoint.
func runServe(cfg *serve.Config, cpuPath, tracePath string, stderr io.Writer) int {
	stopProfiles, err := startProfiles(cpuPath, tracePath)
	if err != nil {
		if cfg.Endpoint != nil {
			cfg.Endpoint.Close()
		}
		fmt.Fprintf(stderr, "ustack serve: %v\n", err)
		return 1
	}
	defer stopProfiles()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve.Run(ctx, cfg, stderr); err != nil {
		fmt.Fprintf(stderr, "ustack serve: %v\n", err)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range splitList(s) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
