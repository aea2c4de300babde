//go:build linux

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/netns/netnstest"
)

// TestServeCommand runs the real `ustack serve` binary on a TUN device in
// a namespace of its own, fetches from it with the kernel's TCP, and stops
// it with SIGTERM: it must shut down cleanly and exit 0.
func TestServeCommand(t *testing.T) {
	requireNamespaces(t)
	bin := buildUstack(t)

	k := netnstest.New(t, "cmdk")
	var cmd *exec.Cmd
	var stderr io.ReadCloser
	require.NoError(t, k.Do(func() error {
		cmd = exec.Command(bin, "serve", "-link", "tun:cmdtun0", "-addr", "198.18.80.2/24",
			"-peer-addr", "198.18.80.1/24", "-qdisc", "enqlock", "-http", "8080")
		var err error
		stderr, err = cmd.StderrPipe()
		if err != nil {
			return err
		}
		return cmd.Start()
	}))
	lines := bufio.NewScanner(stderr)
	require.True(t, lines.Scan(), "serve prints what it serves")
	require.Contains(t, lines.Text(), "http 8080")
	go io.Copy(io.Discard, stderr)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = k.Do(func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := client.Get("http://198.18.80.2:8080/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond)
	require.Contains(t, string(body), "qdisc enqlock")
	resp, err := client.Get(fmt.Sprintf("http://198.18.80.2:8080/bytes/%d", 1<<20))
	require.NoError(t, err)
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, int64(1<<20), n)
	client.CloseIdleConnections()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "a clean exit after SIGTERM")
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("ustack serve did not exit after SIGTERM")
	}
}

// buildUstack builds the real ustack binary into the test's temporary
// directory and returns its path.
func buildUstack(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "ustack")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ustack-dev/ustack/cmd/ustack").CombinedOutput()
	require.NoError(tb, err, "build ustack: %s", out)
	return bin
}
