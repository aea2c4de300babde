package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// progressAfter is how long a run must be expected to take before it gets
// a progress bar.
const progressAfter = 3 * time.Second

// usageError is a command-line mistake: exit status 2.
type usageError struct{ error }

func benchMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ustack bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		linkName = fs.String("link", "mem", "links between the hosts, comma-separated, or all: "+strings.Join(bench.Links(), ", ")+" (veth, tun and kveth need root; wg and wg-netstack are WireGuard tunnels in this process with ustack or wireguard-go's netstack behind them)")
		tests    = fs.String("test", "udp_stream,tcp_rr", "tests, comma-separated, or all: "+strings.Join(bench.Tests(), ", "))
		qdiscs   = fs.String("qdisc", "all", "queueing disciplines, comma-separated, or all: "+strings.Join(sched.Names(), ", "))
		senders  = fs.String("senders", "1,64", "sender (session) counts, comma-separated")
		size     = fs.Int("size", 0, "message size in bytes (0: 120 for udp_stream, 16384 for tcp_stream, 1 for rr tests)")
		duration = fs.Duration("duration", time.Second, "measured window of each run")
		count    = fs.Int("count", 0, "runs of each configuration, reported as medians (0: as many as fit in 75s, 1 to 3)")
		txCost   = fs.String("mem-tx-cost", "0,0", "mem link: busy cost per WritePackets call and per packet, as CALL,PACKET (e.g. 2us,100ns)")
		impair   = fs.String("impair", "none", "faults on ustack's link, e.g. loss=5%,dup=1%,reorder=1%,corrupt=0.1%,delay=1ms,jitter=100us,seed=1")
		mtu      = fs.Int("mtu", mem.DefaultMTU, fmt.Sprintf("link MTU (%d to %d; wg, wg-netstack: of the wire under the tunnel, whose TUNs get 80 less)", tun.MinMTU, tun.MaxMTU))
		reverse  = fs.Bool("reverse", false, "veth, tun, kveth: the Linux stack is the client (ustack receives the stream, answers requests)")
		delACK   = fs.Bool("delayed-ack", true, "ustack hosts hold a request/response flow's pure ACK for its answer to carry (stack.TCPOptions.DelayedACK); false sends every ACK at once, as gVisor does")
		offload  = fs.Bool("offload", true, "veth, tun, kveth: offloads (checksum, segmentation, coalescing); false takes ustack's virtio-net header away and turns the kernel's veth ends' offloads off, so that kveth is the kernel without them")
		txBatch  = fs.Int("tx-batch", 0, "veth: packets per sendmmsg (1: one syscall per packet; 0: the default batch)")
		queues   = fs.Int("queues", 1, "veth, tun: device queues (PACKET_FANOUT sockets, TUN queues)")
		gso      = fs.Bool("mem-gso", false, "mem link: carry TCP super-segments whole (TSO/GRO)")
		csum     = fs.Bool("mem-csum-offload", true, "mem link: checksum offload (with it on, -impair corrupt= drops the packets it would corrupt: no stack would verify them)")
		ring     = fs.Int("mem-ring", mem.DefaultRingSize, "mem link: ring size per direction, in packets")
		batch    = fs.Int("mem-batch", mem.DefaultBatchSize, "mem link: packets delivered per receive round")
		asJSON   = fs.Bool("json", false, "write results as JSON")
		asCSV    = fs.Bool("csv", false, "write results as CSV")
		plotPath = fs.String("plot", "", "also draw rate against senders into this PNG file")
		qlimit   = fs.Int("qdisc-limit", sched.DefaultLimit, "queue length of every qdisc, in packets")
		handOff  = fs.Bool("qdisc-handoff", false, "our qdiscs send from their background goroutine even when idle, sparing the writer the link's system call (sched.Options.HandOff); default: bypass, the writer sends")
		busyPoll = fs.String("busypoll", "off", "ustack hosts' busy polling, comma-separated modes to compare: off, on:<us>, spin:<us> (ignores runnable goroutines; for comparison), adaptive[:<us>]")
		caches   = fs.String("cache", "default", "ustack hosts' buffer caches, comma-separated settings to compare: on, off, default ("+stack.DefaultCache.String()+")")
		contend  = fs.Bool("contention", false, "after the table, print each cell's qdisc counters, lock contention and WritePacket latency histogram (JSON always carries them)")
		cpuPath  = fs.String("cpuprofile", "", "write a CPU profile of the whole run (every cell, both hosts and the harness) to this file")
		trace    = fs.String("trace", "", "write an execution trace of the whole run to this file (go tool trace; large: run one short cell)")
		procs    = fs.Int("procs", 0, "GOMAXPROCS for the run (0: Go's default, one per CPU); every host and the harness share this process, so the kernel's side gets the same")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ustack bench [flags]\n\nRuns netperf-style tests between two ustack hosts in this process and\nprints one row per configuration (medians of -count runs, alternated).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ustack bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	plan, err := func() (bench.Plan, error) {
		if *asJSON && *asCSV {
			return bench.Plan{}, usageError{errors.New("-json and -csv: choose one")}
		}
		p := bench.Plan{Size: *size, Duration: *duration, Count: *count}
		var err error
		if p.Links, err = parseList(*linkName, bench.Links(), "link"); err != nil {
			return p, err
		}
		if p.Tests, err = parseList(*tests, bench.Tests(), "test"); err != nil {
			return p, err
		}
		if p.Qdiscs, err = parseList(*qdiscs, sched.Names(), "qdisc"); err != nil {
			return p, err
		}
		if p.Senders, err = parseInts(*senders); err != nil {
			return p, err
		}
		for _, m := range splitList(*busyPoll) {
			bp, err := poll.Parse(m)
			if err != nil {
				return p, usageError{fmt.Errorf("-busypoll: %w", err)}
			}
			p.BusyPolls = append(p.BusyPolls, bp)
		}
		if len(p.BusyPolls) == 0 {
			return p, usageError{errors.New("-busypoll: give at least one mode (off, on:<us>, spin:<us>, adaptive)")}
		}
		for _, m := range splitList(*caches) {
			cm, err := parseCache(m)
			if err != nil {
				return p, usageError{fmt.Errorf("-cache: %w", err)}
			}
			if !slices.Contains(p.Caches, cm) {
				p.Caches = append(p.Caches, cm)
			}
		}
		if len(p.Caches) == 0 {
			return p, usageError{errors.New("-cache: give at least one setting (on, off, default)")}
		}
		if *procs < 0 {
			return p, usageError{fmt.Errorf("-procs %d: must be 0 (Go's default) or more", *procs)}
		}
		if *count < 0 {
			return p, usageError{fmt.Errorf("-count %d: must be 0 (automatic) or more", *count)}
		}
		mo := mem.DefaultOptions()
		mo.MTU, mo.GSO, mo.ChecksumOffload, mo.RingSize, mo.BatchSize = uint32(*mtu), *gso, *csum, *ring, *batch
		if err := checkMTU(*mtu); err != nil {
			return p, usageError{err}
		}
		if *ring < 1 || *batch < 1 {
			return p, usageError{fmt.Errorf("-mem-ring %d, -mem-batch %d: must be at least 1", *ring, *batch)}
		}
		if mo.TXCost, err = mem.ParseTXCost(*txCost); err != nil {
			return p, usageError{fmt.Errorf("-mem-tx-cost: %w", err)}
		}
		im, err := link.ParseImpairments(*impair)
		if err != nil {
			return p, usageError{fmt.Errorf("-impair: %w", err)}
		}
		// Faults go to every link of the plan, through package impair;
		// the MTU to the devices here and to mem in its own options.
		p.Impair, p.MTU = im, *mtu
		if *txBatch < 0 || *queues < 1 {
			return p, usageError{fmt.Errorf("-tx-batch %d, -queues %d: must be at least 0 and 1", *txBatch, *queues)}
		}
		p.Reverse = *reverse
		if !*delACK {
			tcp := stack.DefaultTCPOptions()
			tcp.DelayedACK = -1
			p.TCP = &tcp
		}
		p.AFPacket = &afpacket.Options{TXBatch: *txBatch, Queues: *queues}
		p.Tun = &tun.Options{Queues: *queues}
		p.NoOffload = !*offload
		if slices.Contains(p.Links, "mem") {
			if err := mo.Validate(); err != nil {
				return p, usageError{err}
			}
		}
		p.Mem = &mo
		if *qlimit < 1 {
			return p, usageError{fmt.Errorf("-qdisc-limit %d: must be at least 1", *qlimit)}
		}
		p.QdiscOptions = &sched.Options{Limit: *qlimit, HandOff: *handOff}
		if err := p.Validate(); err != nil {
			return p, usageError{err}
		}
		return p, nil
	}()
	if err != nil {
		fmt.Fprintf(stderr, "ustack bench: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}

	if *procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(*procs))
	}
	stopProfiles, err := startProfiles(*cpuPath, *trace)
	if err != nil {
		fmt.Fprintf(stderr, "ustack bench: %v\n", err)
		return 1
	}
	defer stopProfiles()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	progress := progressFor(plan, stderr)
	results, err := bench.RunPlan(ctx, plan, progress)
	if err != nil {
		fmt.Fprintf(stderr, "ustack bench: %v\n", err)
		return 1
	}
	switch {
	case *asJSON:
		err = bench.WriteJSON(stdout, results)
	case *asCSV:
		err = bench.WriteCSV(stdout, results)
	default:
		err = bench.WriteTable(stdout, results)
		if err == nil {
			err = bench.WriteBusyPoll(stdout, results)
		}
		if err == nil && *contend {
			err = bench.WriteContention(stdout, results)
		}
	}
	if err == nil && *plotPath != "" {
		err = bench.WritePlot(*plotPath, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack bench: %v\n", err)
		return 1
	}
	return 0
}

// progressFor returns a progress bar on stderr for runs long enough to
// want one, when stderr is a terminal; nil otherwise.
func progressFor(p bench.Plan, stderr io.Writer) bench.Progress {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || p.Estimate() < progressAfter {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int, c bench.Config) {
		if bar == nil {
			bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(stderr),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetWidth(30))
		}
		if done == total {
			bar.Finish()
			return
		}
		bar.Describe(c.String())
		bar.Set(done)
	}
}

// parseList reads a comma-separated list of names from valid, or "all".
func parseList(s string, valid []string, what string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return valid, nil
	}
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(valid, name) {
			return nil, usageError{fmt.Errorf("unknown %s %q: valid choices are %s, or all", what, name, strings.Join(valid, ", "))}
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// parseCache reads one -cache setting.
func parseCache(s string) (stack.CacheMode, error) {
	switch s {
	case "on":
		return stack.CacheOn, nil
	case "off":
		return stack.CacheOff, nil
	case "default":
		return stack.CacheDefault, nil
	}
	return 0, fmt.Errorf("unknown setting %q: valid settings are on, off, default", s)
}

// parseInts reads a comma-separated list of sender counts.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > bench.MaxSessions {
			return nil, usageError{fmt.Errorf("-senders %q: want counts from 1 to %d, comma-separated", s, bench.MaxSessions)}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}
