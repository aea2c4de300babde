//go:build linux

package integration

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/serve"
)

// TestServePeerPaused downloads from `ustack serve` with curl, a separate
// process on the kernel's side, and stops curl with SIGSTOP for three
// seconds in the middle: its socket fills, the kernel closes the window,
// ustack waits with zero-window probes instead of giving up, and after
// SIGCONT the download completes, every byte as served.
func TestServePeerPaused(t *testing.T) {
	needTool(t, "curl", "curl")
	for _, kind := range []string{"veth", "tun"} {
		t.Run(kind, func(t *testing.T) {
			n := newSrvNet(t, kind, sched.EnqLock, link.Impairments{}, nil)
			size := sized(64 << 20)
			body := filepath.Join(t.TempDir(), "body")
			url := fmt.Sprintf("http://%s/bytes/%d", netip.AddrPortFrom(srvUstack4.Addr(), 80), size)
			// Slow enough that the pause falls in the middle of it.
			cmd := exec.Command("curl", "-sSf", "--limit-rate", "20M", "--max-time", "300", "-o", body, url)
			var stderr bytes.Buffer // read only after Wait
			cmd.Stderr = &stderr
			require.NoError(t, n.k.Do(cmd.Start))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					<-done
				}
			}()
			tunWaitFor(t, 30*time.Second, "curl to get going", func() bool {
				fi, err := os.Stat(body)
				return err == nil && fi.Size() > size/8
			})
			before := snapshot(n)
			require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
			time.Sleep(3 * time.Second)
			paused := snapshot(n).minus(before)
			require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
			select {
			case err := <-done:
				require.NoError(t, err, "curl: %s", stderr.String())
			case <-time.After(5 * time.Minute):
				t.Fatal("the download did not finish after the peer resumed")
			}
			d := snapshot(n).minus(before)
			t.Logf("while paused:%v", paused)
			require.Zero(t, d["TCP.EstablishedResets"], "no connection was reset")
			require.Zero(t, d["TCP.EstablishedTimedout"], "none timed out")

			f, err := os.Open(body)
			require.NoError(t, err)
			defer f.Close()
			got, want := sha256.New(), sha256.New()
			m, err := io.Copy(got, f)
			require.NoError(t, err)
			require.Equal(t, size, m)
			io.Copy(want, serve.Pattern(size))
			require.Equal(t, want.Sum(nil), got.Sum(nil), "sha256 of the download")
		})
	}
}
