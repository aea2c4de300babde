//go:build linux

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/serve"
)

// TestRootlessKit runs RootlessKit 1 (Docker rootless's network) as the
// tools' user with ustack as its slirp4netns: RootlessKit creates the
// TAP device, starts ustack without -c on the child's PID, configures
// the device after the ready byte and stops ustack with SIGKILL. The
// child fetches from a host address (the host's loopback is refused),
// and serves a file the host fetches through the port driver: RootlessKit's
// own (builtin) and ustack's API socket (slirp4netns), ustack confined
// for one and not for the other.
func TestRootlessKit(t *testing.T) {
	needTool(t, "rootlesskit", "rootlesskit")
	e := setupTools(t)
	onHost := e.serveHTTP(t, hostAddr4.Addr())
	www := filepath.Join(e.dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	n := sized(16 << 20)
	f, err := os.Create(filepath.Join(www, "blob"))
	require.NoError(t, err)
	_, err = f.ReadFrom(serve.Pattern(n))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	for i, tc := range []struct{ driver, sandbox string }{{"builtin", "true"}, {"slirp4netns", "false"}} {
		t.Run(tc.driver, func(t *testing.T) {
			hostPort := 18090 + i
			script := fmt.Sprintf(`busybox ip -o link show tap0 | busybox grep -o link/ether
busybox ip -o -4 addr show tap0 | busybox grep -o 'inet [0-9./]*'
busybox wget -q -O - http://%s/bytes/%d | busybox sha256sum
busybox httpd -f -p 8080 -h %s &
echo serving
busybox cat >/dev/null`, onHost, n, www)
			c := e.cmd("rootlesskit", "--pidns", "--state-dir", filepath.Join(e.run, "rk-"+tc.driver),
				"--net=slirp4netns", "--slirp4netns-binary="+filepath.Join(e.bin, "slirp4netns"), "--slirp4netns-sandbox="+tc.sandbox,
				"--disable-host-loopback", "--port-driver="+tc.driver, "-p", fmt.Sprintf("127.0.0.1:%d:8080/tcp", hostPort),
				"sh", "-c", script)
			stdin, err := c.StdinPipe()
			require.NoError(t, err)
			stdout, err := c.StdoutPipe()
			require.NoError(t, err)
			var stderr syncBuffer
			c.Stderr = &stderr
			require.NoError(t, c.Start())
			defer func() {
				stdin.Close()
				io.Copy(io.Discard, stdout)
				require.NoError(t, c.Wait(), "rootlesskit: %s", stderr.String())
				e.requireNoneLeft(t, "once RootlessKit ended")
			}()
			out := bufio.NewReader(stdout)
			var lines []string
			for len(lines) < 4 {
				l, err := out.ReadString('\n')
				require.NoError(t, err, "the child's output so far: %q; rootlesskit: %s", lines, stderr.String())
				lines = append(lines, strings.TrimSpace(l))
			}
			require.Equal(t, []string{"link/ether", "inet 10.0.2.100/24", patternSum(n) + "  -", "serving"}, lines)
			require.Equal(t, patternSum(n), e.fetchEventually(t, fmt.Sprintf("http://%s/blob", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(hostPort)))))
		})
	}
}
