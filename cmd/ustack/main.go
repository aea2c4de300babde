// Command ustack runs the ustack userspace network stack: `ustack bench`
// measures two in-process hosts against each other.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `ustack: a userspace TCP/UDP/IP stack

Usage:
  ustack bench [flags]   benchmark two ustack hosts in one process (no root)
  ustack help [command]  show help

Run 'ustack bench -h' for the benchmark's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
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
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "bench" {
			return benchMain([]string{"-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ustack: unknown command %q: valid commands are bench, help\n", args[0])
		return 2
	}
}
