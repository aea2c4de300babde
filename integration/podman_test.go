//go:build linux

package integration

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/serve"
)

// podmanImage is the test image's name: busyboxImage, imported.
const podmanImage = "localhost/ustack-busybox"

// podmanEnv is Podman 4 run rootless by the tools' user, configured as a
// rootless user on a host without crun's cgroup support would configure
// it (runc, cgroupfs, events in a file), its slirp4netns being ustack
// (network_cmd_path).
type podmanEnv struct {
	*toolEnv
	www string // served by the containers' httpd (a volume)
}

// setupPodman configures Podman for the user and imports the test
// image; at the end every container and network goes.
func setupPodman(t *testing.T) *podmanEnv {
	needTool(t, "podman", "podman")
	needTool(t, "runc", "runc")
	e := &podmanEnv{toolEnv: setupTools(t)}
	conf := filepath.Join(e.home, ".config", "containers")
	require.NoError(t, os.MkdirAll(conf, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(conf, "containers.conf"), []byte(fmt.Sprintf(`[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
network_cmd_path = %q
`, filepath.Join(e.bin, "slirp4netns"))), 0o644))
	// vfs: the image is one small layer, and vfs needs neither
	// fuse-overlayfs nor the kernel's unprivileged overlay.
	require.NoError(t, os.WriteFile(filepath.Join(conf, "storage.conf"), []byte("[storage]\ndriver = \"vfs\"\n"), 0o644))
	image := filepath.Join(e.dir, "image.tar")
	busyboxImage(t, image)
	e.www = filepath.Join(e.dir, "www")
	require.NoError(t, os.Mkdir(e.www, 0o755))
	for _, p := range []string{filepath.Join(e.home, ".config"), conf, filepath.Join(conf, "containers.conf"), filepath.Join(conf, "storage.conf"), image} {
		require.NoError(t, os.Chown(p, e.uid, e.gid))
	}
	t.Cleanup(func() {
		e.podman("rm", "--all", "--force", "--time", "0").Run()
		e.podman("network", "prune", "--force").Run()
	})
	e.mustPodman(t, "import", image, podmanImage)
	return e
}

// podman is `podman ARGS` as the user.
func (e *podmanEnv) podman(args ...string) *exec.Cmd {
	return e.cmd(append([]string{"podman"}, args...)...)
}

// mustPodman runs podman and returns its standard output, failing the
// test with its output if it fails.
func (e *podmanEnv) mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	c := e.podman(args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	require.NoError(t, err, "podman %q: %s%s", args, out, stderr.String())
	return string(out)
}

// servedFile writes n pattern bytes to the containers' www directory as
// name and returns their sum.
func (e *podmanEnv) servedFile(t *testing.T, name string, n int64) string {
	f, err := os.Create(filepath.Join(e.www, name))
	require.NoError(t, err)
	_, err = f.ReadFrom(serve.Pattern(n))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return patternSum(n)
}

// fetchEventually fetches url from the host namespace once the server
// behind it answers (a container's httpd starts after podman returns),
// within a deadline, and returns the body's sum.
func (e *toolEnv) fetchEventually(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: e.dialer().DialContext}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := c.Get(url)
		if err == nil {
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, url)
			return sumOf(t, resp.Body)
		}
		require.True(t, time.Now().Before(deadline), "%s never answered: %v", url, err)
	}
}

// TestPodman runs Podman 4 rootless with ustack as its slirp4netns:
// outbound HTTP checked whole, port forwards through rootlessport and
// through ustack's API socket, a user-defined network (its rootless
// network namespace served by ustack), IPv6 from ustack's router
// advertisements, and that nothing is left once the containers are gone.
func TestPodman(t *testing.T) {
	e := setupPodman(t)
	lo4 := e.serveHTTP(t, netip.MustParseAddr("127.0.0.1"))
	lo6 := e.serveHTTP(t, netip.MustParseAddr("::1"))
	onHost := e.serveHTTP(t, hostAddr4.Addr())
	n := sized(16 << 20)
	wantSum := patternSum(n) + "  -\n"

	t.Run("ustack is slirp4netns", func(t *testing.T) {
		out := e.mustPodman(t, "info", "--format", "{{.Host.Slirp4NetNS.Executable}} {{.Host.Slirp4NetNS.Version}}")
		require.Contains(t, out, filepath.Join(e.bin, "slirp4netns"))
		require.Contains(t, out, "slirp4netns version 1.2.0+ustack")
	})
	t.Run("outbound http", func(t *testing.T) {
		out := e.mustPodman(t, "run", "--rm", "--network", "slirp4netns:allow_host_loopback=true", podmanImage,
			"sh", "-c", fmt.Sprintf("wget -q -O - http://10.0.2.2:%d/bytes/%d | sha256sum", lo4.Port(), n))
		require.Equal(t, wantSum, out)
	})
	t.Run("host loopback refused by default", func(t *testing.T) {
		out := e.mustPodman(t, "run", "--rm", podmanImage, "sh", "-c", fmt.Sprintf("wget -q -O /dev/null http://10.0.2.2:%d/bytes/1 || echo refused", lo4.Port()))
		require.Equal(t, "refused\n", out)
	})
	for _, pf := range []struct{ name, network string }{
		{"port forward, rootlessport", "slirp4netns"},
		{"port forward, slirp4netns's API", "slirp4netns:port_handler=slirp4netns"},
	} {
		t.Run(pf.name, func(t *testing.T) {
			const hostPort = 18080
			sum := e.servedFile(t, "blob", n)
			name := strings.ReplaceAll(strings.ReplaceAll(pf.name, " ", "-"), ",", "")
			name = strings.ReplaceAll(strings.ReplaceAll(name, "'", ""), ".", "")
			e.mustPodman(t, "run", "-d", "--name", name, "--network", pf.network, "-p", fmt.Sprintf("127.0.0.1:%d:8080", hostPort),
				"-v", e.www+":/www:ro", podmanImage, "httpd", "-f", "-p", "8080", "-h", "/www")
			defer e.mustPodman(t, "rm", "--force", "--time", "0", name)
			require.Equal(t, sum, e.fetchEventually(t, fmt.Sprintf("http://127.0.0.1:%d/blob", hostPort)))
		})
	}
	t.Run("user-defined network", func(t *testing.T) {
		e.mustPodman(t, "network", "create", "ustack-net")
		defer e.mustPodman(t, "network", "rm", "--force", "ustack-net")
		out := e.mustPodman(t, "run", "--rm", "--network", "ustack-net", podmanImage,
			"sh", "-c", fmt.Sprintf("wget -q -O - http://%s/bytes/%d | sha256sum", onHost, n))
		require.Equal(t, wantSum, out)
	})
	t.Run("IPv6 from router advertisements", func(t *testing.T) {
		// The container's SLAAC address (dynamic, from ustack's
		// advertisements of fd00::/64), then the host's ::1 through the
		// gateway fd00::2.
		script := fmt.Sprintf(`for i in $(seq 100); do ip -6 addr show dev tap0 | grep -q 'fd00::.* dynamic' && break; sleep 0.1; done
ip -6 addr show dev tap0
wget -q -O - http://[fd00::2]:%d/bytes/%d | sha256sum`, lo6.Port(), n)
		out := e.mustPodman(t, "run", "--rm", "--network", "slirp4netns:enable_ipv6=true,allow_host_loopback=true", podmanImage, "sh", "-c", script)
		require.Regexp(t, `inet6 fd00::[0-9a-f:]+/64 scope global dynamic`, out)
		require.NotContains(t, out, "dadfailed")
		require.True(t, strings.HasSuffix(out, wantSum), "%s", out)
	})
	t.Run("teardown leaves nothing", func(t *testing.T) {
		e.mustPodman(t, "rm", "--all", "--force", "--time", "0")
		// Only Podman's pause process, its user namespace's holder.
		var pause []int
		for _, p := range e.processes() {
			if strings.Contains(p, "catatonit") {
				var pid int
				fmt.Sscan(p, &pid)
				pause = append(pause, pid)
			}
		}
		e.requireNoneLeft(t, "after podman rm", pause...)
	})
}
