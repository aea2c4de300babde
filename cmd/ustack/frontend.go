package main

// What the slirp4netns and pasta front ends share: how a refused command
// line is reported, the versions --version prints, and the checks of
// values against what ustack's links take. Each front end parses its
// original's command line into its own options (slirpOptions,
// pastaOptions); mapping those onto sandbox.Config and running them is
// a separate step.

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/link/tun"
)

// frontEndError is a command line a front end refuses, reported the way
// the original program reports it: msg on standard error, then, when
// usage is set, the program's usage (slirp4netns prints it on standard
// output, pasta on standard error), and exit status 1, C's EXIT_FAILURE,
// which both originals use for every refusal.
type frontEndError struct {
	msg   string
	usage bool
}

func (e *frontEndError) Error() string { return e.msg }

// frontEndStatus is the exit status of every refused command line.
const frontEndStatus = 1

// refusal returns err as printed: its message (one or more lines) and
// whether the usage follows. A getopt refusal is always followed by the
// usage, as both originals print it after getopt_long returns '?'.
func refusal(err error) (msg string, usage bool) {
	if e, ok := err.(*frontEndError); ok {
		return e.msg, e.usage
	}
	return err.Error(), true
}

// frontEnd is what settling a command line needs of a front end.
type frontEnd struct {
	// name is the original program's name: argv[0] when argv is empty.
	name string
	// usageOnStdout: after a refusal, the usage goes to standard output
	// (slirp4netns) rather than standard error (pasta).
	usageOnStdout bool
	help          func(w io.Writer, prog string)
	version       func(w io.Writer)
}

// progArgs splits argv into the program name messages start with and
// the arguments.
func (f *frontEnd) progArgs(argv []string) (prog string, args []string) {
	if len(argv) == 0 {
		return f.name, nil
	}
	return argv[0], argv[1:]
}

// settle does what a parsed command line settles by itself: a refusal
// (err), help or version, each printed as the original prints it. It
// returns the exit status and true then; false for a command line to
// run.
func (f *frontEnd) settle(argv []string, stdout, stderr io.Writer, help, version bool, err error) (int, bool) {
	prog, _ := f.progArgs(argv)
	switch {
	case err != nil:
		msg, usage := refusal(err)
		printLines(stderr, msg)
		if usage && f.usageOnStdout {
			f.help(stdout, prog)
		} else if usage {
			f.help(stderr, prog)
		}
		return frontEndStatus, true
	case help:
		f.help(stdout, prog)
		return 0, true
	case version:
		f.version(stdout)
		return 0, true
	}
	return 0, false
}

// printLines writes msg on w ending with one newline, or nothing for an
// empty msg (slirp4netns refuses too few arguments with its usage alone).
func printLines(w io.Writer, msg string) {
	if msg != "" {
		fmt.Fprintln(w, strings.TrimSuffix(msg, "\n"))
	}
}

// checkFrontEndMTU refuses an MTU the original takes but ustack's links
// do not: from tun.MinMTU (IPv6's minimum, below which the TUN endpoint
// will not go) to tun.MaxMTU (65520; slirp4netns goes to 65521, a TAP
// device's largest, and pasta to 65535).
func checkFrontEndMTU(mtu int64) error {
	if mtu < tun.MinMTU || mtu > tun.MaxMTU {
		return &frontEndError{msg: fmt.Sprintf("MTU %d: ustack takes an MTU from %d (IPv6's minimum) to %d (the largest of its TUN and TAP devices)", mtu, tun.MinMTU, tun.MaxMTU)}
	}
	return nil
}

// pathExists is access(path, F_OK), which both originals use to check a
// namespace path while parsing; the error is strerror's wording.
func pathExists(path string) error {
	if err := unix.Access(path, unix.F_OK); err != nil {
		return fmt.Errorf("%s", strerror(err))
	}
	return nil
}

// strerror is C's strerror wording of err as perror prints it: Go's
// errno texts are glibc's with the first letter lowered.
func strerror(err error) string {
	s := err.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// buildVersions reports, from the binary's build information, ustack's
// module version, its VCS revision, and the versions of the modules
// named in deps (those not linked in are absent).
func buildVersions(deps ...string) (version, revision string, dep map[string]string) {
	version, revision, dep = "unknown", "unknown", map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision, dep
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision != "unknown" {
		revision += "-dirty"
	}
	for _, m := range bi.Deps {
		for _, d := range deps {
			if m.Path == d {
				dep[d] = m.Version
			}
		}
	}
	return version, revision, dep
}

// Modules the front ends name in their --version output.
const (
	gvisorModule  = "gvisor.dev/gvisor"
	seccompModule = "github.com/elastic/go-seccomp-bpf"
)
