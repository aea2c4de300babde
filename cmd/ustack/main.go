// Command ustack runs the ustack userspace network stack: `ustack bench`
// measures it, `ustack serve` runs it as a host on a real interface or
// TUN device, `ustack tun` gives a command a network namespace whose
// network is ustack, relaying its flows to host sockets, and `ustack wg`
// is a WireGuard endpoint (an exit node, or a client with proxies into
// the tunnel) with no root and no TUN device. `ustack slirp4netns` and `ustack pasta` (or ustack started under either name,
// through a symlink) take those programs' command lines.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/sandbox"
)

const usage = `ustack: a userspace TCP/UDP/IP stack

Usage:
  ustack bench [flags]   benchmark ustack (two hosts in this process, or
                         against the Linux stack over veth or TUN)
  ustack serve [flags]   run a ustack host with echo, discard and HTTP
                         services on an interface or TUN device
  ustack tun [flags] -- CMD [ARGS...]
                         run CMD in a network namespace whose network is
                         ustack, relaying its flows to host sockets
  ustack wg -config FILE [flags]
                         a WireGuard endpoint with no root and no TUN
                         device: an exit node relaying its peers' flows
                         to host sockets, and SOCKS5/HTTP proxies and
                         local forwards into the tunnel
  ustack slirp4netns [OPTION]... PID|PATH [TAPNAME]
  ustack pasta [OPTION]... [PID | --netns PATH | COMMAND [ARGS...]]
                         serve a namespace on slirp4netns's or pasta's
                         command line, as rootless container tools start
                         them (also when ustack is started under either
                         name)
  ustack help [command]  show help

Run 'ustack bench -h', 'ustack serve -h', 'ustack tun -h', 'ustack wg -h',
'ustack slirp4netns --help' or 'ustack pasta --help' for a command's
options.
`

func main() {
	// First: in the helper that starts a sandbox's command, this becomes
	// the command and never returns.
	sandbox.Init()
	if os.Getenv(relayEnv) != "" {
		os.Exit(relayMain())
	}
	asCommand = true
	os.Exit(dispatch(os.Args, os.Stdout, os.Stderr))
}

// dispatch runs ustack as the program it was started as: under the name
// slirp4netns or pasta (a symlink, which rootless container tools find
// by name) it is that front end, on that program's command line, with
// that program's name in its messages; otherwise it is the ustack
// command.
func dispatch(argv []string, stdout, stderr io.Writer) int {
	if len(argv) > 0 {
		switch filepath.Base(argv[0]) {
		case "slirp4netns":
			return slirp4netnsMain(argv, stdout, stderr)
		case "pasta":
			return pastaMain(argv, stdout, stderr)
		}
	}
	return run(argv[1:], stdout, stderr)
}

// run is main with its streams and exit status made explicit for tests.
// Status 2 means the command line was wrong.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "bench":
		return benchMain(args[1:], stdout, stderr)
	case "serve":
		return serveMain(args[1:], stdout, stderr)
	case "tun":
		return tunMain(args[1:], os.Stdin, stdout, stderr)
	case "wg":
		return wgMain(args[1:], stdout, stderr)
	case "slirp4netns":
		return slirp4netnsMain(append([]string{"ustack slirp4netns"}, args[1:]...), stdout, stderr)
	case "pasta":
		return pastaMain(append([]string{"ustack pasta"}, args[1:]...), stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "bench" {
			return benchMain([]string{"-h"}, stdout, stderr)
		}
		if len(args) > 1 && args[1] == "serve" {
			return serveMain([]string{"-h"}, stdout, stderr)
		}
		if len(args) > 1 && args[1] == "tun" {
			return tunMain([]string{"-h"}, os.Stdin, stdout, stderr)
		}
		if len(args) > 1 && args[1] == "wg" {
			return wgMain([]string{"-h"}, stdout, stderr)
		}
		if len(args) > 1 && args[1] == "slirp4netns" {
			writeSlirp4netnsHelp(stdout, "ustack slirp4netns")
			return 0
		}
		if len(args) > 1 && args[1] == "pasta" {
			writePastaHelp(stdout, "ustack pasta")
			return 0
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ustack: unknown command %q: valid commands are bench, serve, tun, wg, slirp4netns, pasta, help\n", args[0])
		return 2
	}
}

// checkMTU is the -mtu check of every command: 0 (the link's default) or
// an MTU that every link ustack opens takes, from tun.MinMTU (IPv6's
// minimum link MTU) to tun.MaxMTU (the largest a TUN device takes, below
// the mem link's and veth's limits), so that one -mtu means the same on
// every command and link.
func checkMTU[T int | uint](mtu T) error {
	if mtu != 0 && (mtu < tun.MinMTU || mtu > tun.MaxMTU) {
		return fmt.Errorf("-mtu %d: must be from %d to %d, or 0 for the link's default", mtu, tun.MinMTU, tun.MaxMTU)
	}
	return nil
}

// parseFlags parses a command's flags; when it reports !ok the command
// returns status at once: 0 after -h (the usage was printed), 2 for a bad
// flag (the flag package said which).
func parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
