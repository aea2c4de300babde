// Package microsocks runs Debian's microsocks, a real SOCKS5 server, for
// the tests that check ustack's SOCKS5 client and proxy mode against one:
// on a free loopback port, ready when Start returns, stopped when the
// test ends. A test skips (through internal/testenv) where microsocks is
// not installed.
package microsocks

import (
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/testenv"
)

// Options are microsocks' settings; nil means no credentials and the
// system's choice of source address.
type Options struct {
	// User and Pass, if User is not empty, are the only credentials
	// microsocks accepts (-u, -P).
	User, Pass string
	// Bind, if valid, is the address microsocks' outgoing connections
	// come from (-b), so that a test can tell them from its own.
	Bind netip.Addr
}

// Start runs microsocks on 127.0.0.1 until tb ends and returns its
// address once it accepts connections. It skips tb if microsocks is not
// installed.
func Start(tb testing.TB, opts *Options) netip.AddrPort {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	bin, err := exec.LookPath("microsocks")
	if err != nil {
		testenv.Skip(tb, "microsocks is not installed (apt-get install microsocks): nothing to test the SOCKS5 path against")
	}
	// A free port, released for microsocks to take: nothing else on
	// loopback is expected to grab it in between.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	args := []string{"-i", addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port()))}
	if opts.Bind.IsValid() {
		args = append(args, "-b", opts.Bind.String())
	}
	if opts.User != "" {
		args = append(args, "-u", opts.User, "-P", opts.Pass)
	}
	cmd := exec.Command(bin, args...)
	require.NoError(tb, cmd.Start(), "start %s", bin)
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Ready when it accepts.
	require.Eventually(tb, func() bool {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "microsocks listens on %s", addr)
	return addr
}
