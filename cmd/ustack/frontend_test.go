package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/testenv"
)

// originalTimeout bounds a run of an original program: every command
// line the tests give one is refused before it does anything.
const originalTimeout = 20 * time.Second

// runOriginal runs the installed program name (slirp4netns, pasta) with
// args, stdin empty, and returns its exit status, its standard output
// and its standard error lines less the noise of the system logger the
// old Debian pasta writes to (which syslog is missing here), and its
// argv[0] (the path, which getopt's messages start with). It skips
// through testenv.Skip when the program is not installed.
//
// Only command lines the original refuses while parsing may be given:
// one it accepted would start serving a namespace.
func runOriginal(t *testing.T, name string, args ...string) (status int, stdout string, stderr []string, argv0 string) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		pkg := map[string]string{"pasta": "passt", "slirp4netns": "slirp4netns"}[name]
		testenv.Skip(t, "%s is not installed (Debian package %s): %v", name, pkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), originalTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "%s %q ran on: the tests only give originals command lines they refuse", name, args)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n") {
		if strings.HasPrefix(l, "Failed to send ") && strings.HasSuffix(l, " to syslog") {
			continue
		}
		stderr = append(stderr, l)
	}
	return status, out.String(), stderr, path
}

// refusalCase is a command line a front end refuses: msg is the first
// line printed on standard error ("" for none; PROG stands for the
// program name), usage whether the usage follows, and original whether
// the installed original refuses it with the same line (the others are
// ustack's own refusals, or wordings of a newer original).
type refusalCase struct {
	args     []string
	msg      string
	usage    bool
	original bool
}

// requireRefusals checks that fe's settle refuses each case as said,
// with exit status 1, the usage on the stream fe's original uses.
func requireRefusals(t *testing.T, fe *frontEnd, settleFn func([]string, io.Writer, io.Writer) (int, bool), cases []refusalCase) {
	t.Helper()
	for _, tc := range cases {
		status, done, stdout, stderr := settle(settleFn, append([]string{fe.name}, tc.args...)...)
		require.True(t, done, "%q", tc.args)
		require.Equal(t, 1, status, "%q", tc.args)
		first, rest, _ := strings.Cut(stderr, "\n")
		require.Equal(t, strings.ReplaceAll(tc.msg, "PROG", fe.name), first, "%q", tc.args)
		usageOut := rest
		if fe.usageOnStdout {
			usageOut = stdout
		} else {
			require.Empty(t, stdout, "%q", tc.args)
		}
		require.Equal(t, tc.usage, strings.HasPrefix(usageOut, "Usage: "+fe.name+" [OPTION]..."), "%q: %q", tc.args, usageOut)
	}
}

// requireOriginalRefusals runs the installed original of fe on the cases
// it refuses as ustack does and compares the exit status, the message
// and where the usage goes; and that parse words it the same with the
// original's path as the program name.
func requireOriginalRefusals[T any](t *testing.T, fe *frontEnd, parse func([]string) (T, error), cases []refusalCase) {
	t.Helper()
	for _, tc := range cases {
		if !tc.original {
			continue
		}
		status, stdout, stderr, argv0 := runOriginal(t, fe.name, tc.args...)
		require.Equal(t, 1, status, "%q", tc.args)
		want := strings.ReplaceAll(tc.msg, "PROG", argv0)
		switch {
		case want == "":
			require.Equal(t, []string{""}, stderr, "%q", tc.args)
		case tc.usage:
			require.Equal(t, want, stderr[0], "%q", tc.args)
		default:
			// After what pasta says about running as root.
			require.Contains(t, stderr, want, "%q", tc.args)
		}
		if fe.usageOnStdout {
			require.Equal(t, tc.usage, strings.HasPrefix(stdout, "Usage: "), "%q: stdout %q", tc.args, stdout)
		} else {
			require.Empty(t, stdout, "%q", tc.args)
			require.Equal(t, tc.usage, len(stderr) > 1 && strings.HasPrefix(stderr[1], "Usage: "), "%q: %q", tc.args, stderr)
		}
		_, err := parse(append([]string{argv0}, tc.args...))
		msg, usage := refusal(err)
		first, _, _ := strings.Cut(msg, "\n")
		require.Equal(t, []any{want, tc.usage}, []any{first, usage}, "%q", tc.args)
	}
}

// roundTrip is how a front end's tests check that its options, written
// back by args, parse to the same options.
type roundTrip[T any] struct {
	parse func(argv []string) (T, error)
	args  func(*T) []string
	// stops reports help or version, where there is nothing to write.
	stops func(*T) bool
	// clean zeroes what is printed rather than parsed (warnings).
	clean func(*T)
}

func (r roundTrip[T]) check(t *testing.T, o T) {
	t.Helper()
	if r.stops(&o) {
		return
	}
	args := r.args(&o)
	again, err := r.parse(append([]string{"prog"}, args...))
	require.NoError(t, err, "%q", args)
	r.clean(&o)
	require.Equal(t, o, again, "%q", args)
}

// fuzz checks that no command line makes the parser panic and that what
// it accepts round-trips; seeds are command lines with words separated
// by spaces.
func (r roundTrip[T]) fuzz(f *testing.F, seeds ...string) {
	for _, s := range getoptSeeds {
		f.Add(strings.Join(s, "\x00"))
	}
	for _, s := range seeds {
		f.Add(strings.ReplaceAll(s, " ", "\x00"))
	}
	f.Fuzz(func(t *testing.T, in string) {
		if o, err := r.parse(append([]string{"prog"}, splitArgs(in)...)); err == nil {
			r.check(t, o)
		}
	})
}

// settle runs a front end's settle function and returns what it printed.
func settle(f func([]string, io.Writer, io.Writer) (int, bool), argv ...string) (status int, done bool, stdout, stderr string) {
	var out, errb bytes.Buffer
	status, done = f(argv, &out, &errb)
	return status, done, out.String(), errb.String()
}

// requireSettledOK runs a front end's settle function on a command line
// it settles successfully (help, version) and returns its output.
func requireSettledOK(t *testing.T, f func([]string, io.Writer, io.Writer) (int, bool), argv ...string) string {
	t.Helper()
	status, done, stdout, stderr := settle(f, argv...)
	require.True(t, done, "%q", argv)
	require.Zero(t, status, "%q", argv)
	require.Empty(t, stderr, "%q", argv)
	return stdout
}

// existingFile returns the path of a new empty file, where a test needs
// a namespace path that exists.
func existingFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	return p
}

func TestDispatchByName(t *testing.T) {
	for _, tc := range []struct {
		argv       []string
		status     int
		stdout     string
		stderrLine string
	}{
		{[]string{"/usr/local/bin/slirp4netns", "--help"}, 0, "Usage: /usr/local/bin/slirp4netns [OPTION]... PID|PATH [TAPNAME]", ""},
		{[]string{"slirp4netns", "--version"}, 0, "slirp4netns version 1.2.0+ustack", ""},
		{[]string{"slirp4netns", "--foo"}, 1, "Usage: slirp4netns", "slirp4netns: unrecognized option '--foo'"},
		// slirp4netns's warnings go first, to standard output.
		{[]string{"slirp4netns", "--no-host-loopback", "-h"}, 0, "WARNING: --no-host-loopback is a deprecated name of --disable-host-loopback\nUsage: slirp4netns", ""},
		{[]string{"/usr/bin/pasta", "--help"}, 0, "Usage: /usr/bin/pasta [OPTION]... [COMMAND] [ARGS]...", ""},
		{[]string{"pasta", "--version"}, 0, "pasta 2024_12_11.09478d5+ustack", ""},
		{[]string{"pasta", "--map-gw"}, 1, "", "pasta: unrecognized option '--map-gw'"},
		{[]string{"ustack", "slirp4netns", "-v"}, 0, "slirp4netns version", ""},
		{[]string{"ustack", "slirp4netns", "--mtu=abc", "1"}, 1, "Usage: ustack slirp4netns", "MTU must be a positive integer (< 65522)"},
		{[]string{"ustack", "pasta", "-h"}, 0, "Usage: ustack pasta [OPTION]...", ""},
		{[]string{"ustack", "pasta", "-t", "99999"}, 1, "", "Invalid port specifier 99999"},
		{[]string{"ustack", "help", "pasta"}, 0, "Usage: ustack pasta", ""},
		{[]string{"ustack", "help", "slirp4netns"}, 0, "Usage: ustack slirp4netns", ""},
		// A command line the front end accepts is run: here, on a
		// namespace that does not exist (no PID reaches 2^31-1), which
		// fails before anything is made.
		{[]string{"/usr/bin/slirp4netns", "-c", "2147483647", "tap0"}, 1, "", "/usr/bin/slirp4netns: sandbox: open network namespace /proc/2147483647/ns/net: no such file or directory (give /var/run/netns/NAME or /proc/PID/ns/net)"},
		{[]string{"ustack", "pasta", "--config-net", "-a", "192.0.2.2", "-g", "192.0.2.1", "-I", "tap0", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--netns", "/nonexistent/ustack-test"}, 1, "", "ustack pasta: sandbox: open network namespace /nonexistent/ustack-test: no such file or directory (give /var/run/netns/NAME or /proc/PID/ns/net)"},
		// Another name is ustack itself.
		{[]string{"/opt/ustack", "help"}, 0, "ustack: a userspace TCP/UDP/IP stack", ""},
	} {
		var out, errb bytes.Buffer
		status := dispatch(tc.argv, &out, &errb)
		require.Equal(t, tc.status, status, "%q: %s", tc.argv, errb.String())
		require.True(t, strings.HasPrefix(out.String(), tc.stdout), "%q: stdout %q", tc.argv, out.String())
		if tc.stderrLine == "" {
			require.Empty(t, errb.String(), "%q", tc.argv)
		} else {
			require.Equal(t, tc.stderrLine, strings.SplitN(errb.String(), "\n", 2)[0], "%q", tc.argv)
		}
	}
}
