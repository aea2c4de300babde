//go:build linux

package integration

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/sandbox"
)

// These tests run the real `ustack tun` binary with its default limits
// (forward.Relay over host sockets) in a network namespace the test made,
// which stands for the host: its loopback serves the host services, and
// it routes blackholed (203.0.113.0/24) to a namespace that drops
// everything, so a connect there waits for an answer that never comes.
// The sandbox's programs are this test binary, playing the modes added
// to childModes here.

// blackholed is the prefix the host namespace routes to nowhere.
var blackholed = netip.MustParsePrefix("203.0.113.0/24")

func init() {
	childModes["connect"] = func(args []string) (string, error) { // ADDR N: N connects at once, held until all ended
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return "", err
		}
		return connectAll(slices(args[0], n), nil), nil
	}
	childModes["floodfetch"] = func(args []string) (string, error) { // URL SIZE DST...: a download, connects to DSTs meanwhile
		size, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return "", err
		}
		return floodFetch(args[0], size, args[2:])
	}
	childModes["badsyn"] = func(args []string) (string, error) { // GW PORT: SYN+RST and SYN+FIN, then a real connect
		port, err := strconv.Atoi(args[1])
		if err != nil {
			return "", err
		}
		return badSyns(netip.MustParseAddr(args[0]), uint16(port))
	}
}

// slices is n copies of addr.
func slices(addr string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = addr
	}
	return s
}

// connectTimeout bounds each connect of the programs: generous against
// the sandbox's host-side connect timeout (10 s), so that a connect that
// ends by it means ustack neither answered nor refused it (a hang).
const connectTimeout = 40 * time.Second

// connectAll connects to every addr at once, holds the connections until
// every connect has ended, and reports how they ended: "ok N refused N
// timeout N other N". It closes issued, if not nil, once every connect
// has been started.
func connectAll(addrs []string, issued chan<- struct{}) string {
	var ok, refused, timeout, other atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	var wg, started sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			c, err := net.DialTimeout("tcp", a, connectTimeout)
			var ne net.Error
			switch {
			case err == nil:
				ok.Add(1)
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			case errors.Is(err, syscall.ECONNREFUSED):
				refused.Add(1)
			case errors.As(err, &ne) && ne.Timeout():
				timeout.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	started.Wait()
	if issued != nil {
		close(issued)
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	return fmt.Sprintf("ok %d refused %d timeout %d other %d\n", ok.Load(), refused.Load(), timeout.Load(), other.Load())
}

// fetchClient makes a new connection for every request.
var fetchClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// fetch is a download under way: its body and what arrived so far.
type fetch struct {
	body  io.ReadCloser
	h     hash.Hash
	n     int64
	start time.Time
	gap   time.Duration // the longest wait for the next bytes
	// connected is how long the request took to get its response's
	// header (the connect included).
	connected time.Duration
}

func startFetch(url string) (*fetch, error) {
	f := &fetch{h: sha256.New(), start: time.Now()}
	resp, err := fetchClient.Get(url)
	if err != nil {
		return nil, err
	}
	f.connected = time.Since(f.start)
	f.body = resp.Body
	return f, nil
}

// read reads up to limit bytes more (the rest, if limit is negative).
func (f *fetch) read(limit int64) error {
	buf := make([]byte, 64<<10)
	last := time.Now()
	for limit != 0 {
		b := buf
		if limit > 0 && limit < int64(len(b)) {
			b = b[:limit]
		}
		m, err := f.body.Read(b)
		f.h.Write(b[:m])
		f.n += int64(m)
		limit -= int64(m)
		f.gap, last = max(f.gap, time.Since(last)), time.Now()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("download, after %d bytes: %w", f.n, err)
		}
	}
	return nil
}

// result is the download's sha256 and size, and (for the log) how long
// it took and its longest wait for data.
func (f *fetch) result() (sum, log string) {
	f.body.Close()
	return fmt.Sprintf("%x %d\n", f.h.Sum(nil), f.n), fmt.Sprintf("%v (header after %v), longest wait %v", time.Since(f.start).Round(time.Millisecond), f.connected.Round(time.Millisecond), f.gap.Round(time.Millisecond))
}

// floodFetch downloads url (size pattern bytes) and, once its first MiB
// has arrived, connects to every dst at once and starts a second download
// of url meanwhile, on a new connection. It prints each download's sha256
// and size, connectAll's line for the connects, and a line for the log.
func floodFetch(url string, size int64, dsts []string) (string, error) {
	first, err := startFetch(url)
	if err != nil {
		return "", fmt.Errorf("first download: %w", err)
	}
	if err := first.read(1 << 20); err != nil {
		return "", fmt.Errorf("first download: %w", err)
	}
	// The first download is read throughout, so that a stall of the
	// relay shows as its longest wait, not as a full receive buffer.
	errs := make(chan error, 2)
	go func() { errs <- first.read(-1) }()
	connects, issued := make(chan string, 1), make(chan struct{})
	go func() { connects <- connectAll(dsts, issued) }()
	<-issued
	second, err := startFetch(url)
	if err != nil {
		return "", fmt.Errorf("second download, begun during the connects: %w", err)
	}
	go func() { errs <- second.read(-1) }()
	for range 2 {
		if err := <-errs; err != nil {
			return "", err
		}
	}
	sum1, log1 := first.result()
	sum2, log2 := second.result()
	return sum1 + sum2 + <-connects + fmt.Sprintf("first download %s; second %s\n", log1, log2), nil
}

// badSyns sends, below the sandbox kernel's stack, a SYN with RST set and
// one with FIN set to gw:port, then connects there for real (the barrier
// the test counts against).
func badSyns(gw netip.Addr, port uint16) (string, error) {
	r, err := openRawSender(sandbox.DefaultDevice)
	if err != nil {
		return "", err
	}
	defer r.close()
	src := sandbox.DefaultAddr4.Addr()
	const syn, rst, fin = 0x02, 0x04, 0x01
	for i, flags := range []byte{syn | rst, syn | fin} {
		seg := tcpSeg(src, gw, uint16(20000+i), port, 1000, 0, flags, 65535, nil)
		if err := r.send(ip4{src: src, dst: gw, proto: unix.IPPROTO_TCP}.bytes(seg)); err != nil {
			return "", err
		}
	}
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(gw, port).String(), connectTimeout)
	if err != nil {
		return "", fmt.Errorf("the real connect after the crafted SYNs: %w", err)
	}
	c.Close()
	return fmt.Sprintf("sent %d\n", r.sent), nil
}

// hostNet is the namespace that stands for the host of `ustack tun`.
type hostNet struct {
	ns  *netns.NS
	bin string
}

func newHostNet(t *testing.T) *hostNet {
	needPrivilege(t, "the limits tests need network namespaces and TUN", nsProbe())
	needTool(t, "ip", "iproute2")
	ns, err := netns.New("limits")
	needPrivilege(t, "the limits tests build a network namespace", err)
	t.Cleanup(func() { ns.Close() })
	// The blackholed prefix is routed over a veth pair to a namespace of
	// its own that does not forward: it drops what it is sent, silently,
	// so a connect there waits for an answer that never comes (a
	// blackhole route, by contrast, fails the connect at once).
	sink, err := netns.New("limits-sink")
	require.NoError(t, err)
	t.Cleanup(func() { sink.Close() })
	require.NoError(t, netns.Veth(ns, "sink0", sink, "sink1", 0))
	require.NoError(t, ns.AddAddr("sink0", netip.MustParsePrefix("198.19.0.1/24")))
	require.NoError(t, sink.AddAddr("sink1", netip.MustParsePrefix("198.19.0.2/24")))
	require.NoError(t, ns.Do(func() error {
		l, err := netlink.LinkByName("sink0")
		if err != nil {
			return err
		}
		_, dst, err := net.ParseCIDR(blackholed.String())
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.IPv4(198, 19, 0, 2)})
	}))
	return &hostNet{ns: ns, bin: buildUstack(t)}
}

// listen opens a TCP listener on the namespace's loopback.
func (h *hostNet) listen(t *testing.T) net.Listener {
	var ln net.Listener
	require.NoError(t, h.ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return ln
}

// tunRun is one run of `ustack tun -allow-host-loopback -stats FLAGS --
// this binary as mode ARGS` in the host namespace: what the program
// printed, and ustack's counters.
type tunRun struct {
	out   string
	stats tunStats
}

// tunStats are the counters `ustack tun -stats` prints at exit.
type tunStats struct {
	tcpFlows, connectsFailed uint64
	refused                  map[string]uint64
	text                     string
}

var (
	tcpFlowsRe  = regexp.MustCompile(`tcp flows (\d+)`)
	failedRe    = regexp.MustCompile(`connects failed (\d+)`)
	refusedLine = regexp.MustCompile(`refused: (.*)`)
)

func parseTunStats(stderr string) tunStats {
	st := tunStats{refused: map[string]uint64{}, text: stderr}
	if m := tcpFlowsRe.FindStringSubmatch(stderr); m != nil {
		st.tcpFlows, _ = strconv.ParseUint(m[1], 10, 64)
	}
	if m := failedRe.FindStringSubmatch(stderr); m != nil {
		st.connectsFailed, _ = strconv.ParseUint(m[1], 10, 64)
	}
	if m := refusedLine.FindStringSubmatch(stderr); m != nil {
		for _, kv := range strings.Split(m[1], ", ") {
			name, n, ok := strings.Cut(kv, " ")
			if !ok {
				continue
			}
			st.refused[name], _ = strconv.ParseUint(n, 10, 64)
		}
	}
	return st
}

func (h *hostNet) tun(t *testing.T, flags []string, mode string, args ...string) tunRun {
	t.Helper()
	wrap := append(append([]string{"ip", "netns", "exec", h.ns.Name, h.bin, "tun", "-allow-host-loopback", "-stats"}, flags...), "--")
	cmd := childCmd(t, wrap, mode, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	// Far beyond what any of these runs takes: a hang fails the test.
	watchdog := time.AfterFunc(5*time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	watchdog.Stop()
	require.NoError(t, err, "ustack tun -- %s %v: %s", mode, args, stderr.String())
	return tunRun{out: stdout.String(), stats: parseTunStats(stderr.String())}
}

// acceptCount accepts on ln until the test ends, holding every
// connection, and counts them.
func acceptCount(t *testing.T, ln net.Listener) *atomic.Int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	acceptLoop(&wg, ln, func(c net.Conn) {
		n.Add(1)
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return &n
}

func gwAddr(ln net.Listener) string {
	return netip.AddrPortFrom(sandbox.DefaultGateway4, uint16(ln.Addr().(*net.TCPAddr).Port)).String()
}

// TestLimitsConnectBurst opens 1,000 connections at once to one live
// server through `ustack tun` with its default limits: all establish, as
// through slirp4netns and pasta, none refused by a half-open limit.
func TestLimitsConnectBurst(t *testing.T) {
	h := newHostNet(t)
	ln := h.listen(t)
	accepted := acceptCount(t, ln)
	const n = 1000
	run := h.tun(t, nil, "connect", gwAddr(ln), strconv.Itoa(n))
	require.Equal(t, fmt.Sprintf("ok %d refused 0 timeout 0 other 0\n", n), run.out, "ustack: %s", run.stats.text)
	require.Equal(t, int64(n), accepted.Load(), "the host server saw every connection")
	require.Zero(t, run.stats.refused["half_open"])
}

// TestLimitsBlackholeFlood connects to 300 blackholed destinations at once
// while a download runs, and starts a second download meanwhile: both
// complete whole (the test asserts no timing; their times are logged),
// and every connect to a blackholed destination ends in a refusal (a
// reset: the half-open limits', or the host-side connect timeout's), none
// in a hang.
func TestLimitsBlackholeFlood(t *testing.T) {
	const nDsts = 300
	h := newHostNet(t)
	ln := h.listen(t)
	srv := &http.Server{Handler: patternBytes}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	var dsts []string
	for i := range nDsts / 2 {
		a := blackholed.Addr().As4()
		a[3] = byte(1 + i)
		for _, port := range []uint16{80, 443} {
			dsts = append(dsts, netip.AddrPortFrom(netip.AddrFrom4(a), port).String())
		}
	}
	size := sized(256 << 20)
	url := fmt.Sprintf("http://%s/bytes/%d", gwAddr(ln), size)
	run := h.tun(t, nil, "floodfetch", append([]string{url, strconv.FormatInt(size, 10)}, dsts...)...)
	want := fmt.Sprintf("%s %d\n", patternSum(size), size)
	lines := strings.SplitAfter(run.out, "\n")
	require.Len(t, lines, 5, "output: %q", run.out)
	t.Logf("%s%s", lines[3], run.stats.text)
	require.Equal(t, want, lines[0], "the download under way arrived whole")
	require.Equal(t, want, lines[1], "the download begun during the connects arrived whole")
	require.Equal(t, fmt.Sprintf("ok 0 refused %d timeout 0 other 0\n", len(dsts)), lines[2],
		"every connect to a blackholed destination is refused, none hangs; ustack: %s", run.stats.text)
	require.NotZero(t, run.stats.refused["half_open"], "ustack: %s", run.stats.text)
}

// TestLimitsSynFlags sends a SYN with RST set and one with FIN set from
// inside the sandbox: ustack opens nothing for either (Linux drops them)
// and counts them as malformed; a real connect afterwards works.
func TestLimitsSynFlags(t *testing.T) {
	h := newHostNet(t)
	ln := h.listen(t)
	accepted := acceptCount(t, ln)
	port := ln.Addr().(*net.TCPAddr).Port
	run := h.tun(t, nil, "badsyn", sandbox.DefaultGateway4.String(), strconv.Itoa(port))
	require.Equal(t, "sent 2\n", run.out)
	require.Equal(t, uint64(1), run.stats.tcpFlows, "only the real connect opened a flow; ustack: %s", run.stats.text)
	require.Equal(t, uint64(2), run.stats.refused["malformed"], "ustack: %s", run.stats.text)
	// ustack has exited: any connection it made to the host server was
	// made by now.
	require.Equal(t, int64(1), accepted.Load(), "the host server saw only the real connect")
}
