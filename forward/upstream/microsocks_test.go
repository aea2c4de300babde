package upstream_test

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/forward/upstream"
	"github.com/ustack-dev/ustack/internal/testenv"
)

// microsocks starts Debian's microsocks, a real SOCKS5 server, on
// loopback (with credentials if user is not empty) and stops it when
// the test ends. The test skips if the binary is missing.
func microsocks(t *testing.T, user, pass string) string {
	t.Helper()
	bin, err := exec.LookPath("microsocks")
	if err != nil {
		testenv.Skip(t, "microsocks not installed (apt-get install microsocks): the SOCKS5 dialer is not tested against a real server")
	}
	// A free port, released for microsocks to take: nothing else on
	// loopback is expected to grab it in between.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	args := []string{"-i", "127.0.0.1", "-p", strconv.Itoa(addr.Port)}
	if user != "" {
		args = append(args, "-u", user, "-P", pass)
	}
	cmd := exec.Command(bin, args...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Ready when it accepts.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "microsocks listens on %s", addr)
	return addr.String()
}

func TestSOCKS5Microsocks(t *testing.T) {
	echo := echoServer(t)
	addr := microsocks(t, "", "")
	d, err := upstream.Parse("socks5://" + addr)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "through microsocks")
}

func TestSOCKS5MicrosocksAuth(t *testing.T) {
	echo := echoServer(t)
	addr := microsocks(t, "bob", "pa55")
	d, err := upstream.Parse("socks5h://bob:pa55@" + addr)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "authenticated through microsocks")

	d, err = upstream.Parse("socks5://bob:nope@" + addr)
	require.NoError(t, err)
	_, err = d.DialContext(t.Context(), "tcp", echo)
	require.Error(t, err, "wrong credentials are refused")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
}

// TestSOCKS5Context has a SOCKS5 "server" that accepts and never
// answers: the dial ends at ctx's deadline, as a timeout.
func TestSOCKS5Context(t *testing.T) {
	silent := serve(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	d, err := upstream.Parse("socks5://" + silent)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", "198.18.0.1:80")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a dial past its deadline times out: %v", err)
}
