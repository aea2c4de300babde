package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/serve"
	"github.com/ustack-dev/ustack/stack"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	server4 = netip.MustParseAddr("198.18.4.2")
	server6 = netip.MustParseAddr("fd00:4::2")
)

// setup runs a served host on one end of a mem pair and a client stack on
// the other.
func setup(t *testing.T, metrics string) (*serve.Host, *stack.Stack) {
	t.Helper()
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	h, err := serve.New(&serve.Config{
		Endpoint: b,
		Addrs:    []netip.Prefix{netip.PrefixFrom(server4, 24), netip.PrefixFrom(server6, 64)},
		Qdisc:    sched.LList,
		Ports:    serve.Ports{Echo: 7, Discard: 9, HTTP: 80},
		Metrics:  metrics,
	})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	c, err := stack.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	id, err := c.AddNIC(a, nil)
	require.NoError(t, err)
	require.NoError(t, c.AddAddress(id, netip.MustParsePrefix("198.18.4.1/24")))
	require.NoError(t, c.AddAddress(id, netip.MustParsePrefix("fd00:4::1/64")))
	return h, c
}

func TestEchoAndDiscard(t *testing.T) {
	h, c := setup(t, "")
	for _, srv := range []netip.Addr{server4, server6} {
		conn, err := c.DialTCP(context.Background(), netip.AddrPortFrom(srv, 7))
		require.NoError(t, err)
		msg := strings.Repeat("echo me ", 10000)
		go func() {
			conn.Write([]byte(msg))
			conn.(interface{ CloseWrite() error }).CloseWrite()
		}()
		got, err := io.ReadAll(conn)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
		conn.Close()

		u, err := c.DialUDP(netip.AddrPort{}, netip.AddrPortFrom(srv, 7))
		require.NoError(t, err)
		u.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = u.Write([]byte("udp echo"))
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, err := u.Read(buf)
		require.NoError(t, err)
		require.Equal(t, "udp echo", string(buf[:n]))
		u.Close()

		d, err := c.DialTCP(context.Background(), netip.AddrPortFrom(srv, 9))
		require.NoError(t, err)
		_, err = d.Write(make([]byte, 100000))
		require.NoError(t, err)
		d.Close()
	}
	require.Eventually(t, func() bool { return h.Services().DiscardedBytes.Load() == 200000 }, 10*time.Second, time.Millisecond)
	require.Equal(t, uint64(2*80000), h.Services().EchoedBytes.Load())
}

func httpClient(c *stack.Stack) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return c.DialTCP(ctx, netip.MustParseAddrPort(addr))
		},
	}}
}

func TestHTTPBytesAndStatus(t *testing.T) {
	_, c := setup(t, "")
	hc := httpClient(c)
	defer hc.CloseIdleConnections()
	const n = 8 << 20
	resp, err := hc.Get(fmt.Sprintf("http://%s/bytes/%d", server4, n))
	require.NoError(t, err)
	require.Equal(t, int64(n), resp.ContentLength)
	require.NoError(t, serve.CheckBody(resp.Body, n))
	resp.Body.Close()

	resp, err = hc.Get(fmt.Sprintf("http://[%s]/", server6))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), "qdisc llist")

	resp, err = hc.Get(fmt.Sprintf("http://%s/bytes/-1", server4))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestMetrics(t *testing.T) {
	h, c := setup(t, "127.0.0.1:0")
	conn, err := c.DialTCP(context.Background(), netip.AddrPortFrom(server4, 9))
	require.NoError(t, err)
	conn.Write([]byte("count me"))
	conn.Close()
	resp, err := http.Get("http://" + h.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	found := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, want := range []string{
			`ustack_gvisor_total{counter="TCP.PassiveConnectionOpenings"}`,
			`ustack_link_total{counter="RXPackets",nic="eth0"}`,
			`ustack_qdisc_total{counter="sent",nic="eth0",qdisc="llist"}`,
			`ustack_qdisc_lock_contended_total{lock="defer_list",nic="eth0",qdisc="llist"}`,
			`ustack_qdisc_writepacket_seconds_count{nic="eth0",qdisc="llist"}`,
			`ustack_serve_total{counter="accepted"}`,
			`go_goroutines `,
			`process_resident_memory_bytes `,
			`process_open_fds `,
		} {
			if strings.HasPrefix(sc.Text(), want) {
				found[want] = true
			}
		}
	}
	require.Len(t, found, 9, "every family is exported: %v", found)
}

func TestBadConfig(t *testing.T) {
	_, err := serve.New(&serve.Config{})
	require.Error(t, err)
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	defer b.Close()
	_, err = serve.New(&serve.Config{Endpoint: a})
	require.ErrorContains(t, err, "no address")
	a2, b2, err := mem.Pair(nil)
	require.NoError(t, err)
	defer b2.Close()
	_, err = serve.New(&serve.Config{Endpoint: a2, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.4.2/24")}, Qdisc: "nope"})
	require.ErrorContains(t, err, "valid names")
	a3, b3, err := mem.Pair(nil)
	require.NoError(t, err)
	defer b3.Close()
	_, err = serve.New(&serve.Config{Kernel: true, Endpoint: a3})
	require.ErrorContains(t, err, "a link endpoint with Kernel")
	_, err = serve.New(&serve.Config{Kernel: true, Qdisc: sched.LList})
	require.ErrorContains(t, err, "ustack's settings")
}

// TestRunStopsOnCancel: a running host (it has logged what it serves)
// shuts down cleanly when its context ends, and says so.
func TestRunStopsOnCancel(t *testing.T) {
	a, b, err := mem.Pair(nil)
	require.NoError(t, err)
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// Run's log goes through a pipe: each line arrives once Run has
	// written it, so the test cancels exactly when the host serves.
	pr, pw := io.Pipe()
	go func() {
		err := serve.Run(ctx, &serve.Config{Endpoint: b, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.4.2/24")}, Ports: serve.Ports{Echo: 7}}, pw)
		pw.Close()
		done <- err
	}()
	log := bufio.NewScanner(pr)
	if !log.Scan() {
		t.Fatalf("Run ended before it logged what it serves: %v", <-done)
	}
	require.True(t, strings.HasPrefix(log.Text(), "ustack serve: [198.18.4.2/24]"), log.Text())
	require.True(t, strings.HasSuffix(log.Text(), ", echo 7"), log.Text())
	cancel()
	require.True(t, log.Scan())
	require.Equal(t, "ustack serve: shutting down", log.Text())
	require.False(t, log.Scan(), "nothing after the shutdown: %q", log.Text())
	require.NoError(t, <-done)
}
