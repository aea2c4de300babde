// Command flowload serves or opens many idle TCP flows (package
// internal/flowload), for scripts/flows.sh and TestSandboxFlows.
//
//	flowload serve ADDR
//	    echo the first byte of every connection to ADDR and hold it;
//	    prints "listening HOST:PORT" once ready, runs until killed.
//	flowload open [-n 10000] [-c 32] [-start FILE] [-hold FILE|-] ADDR
//	    open n flows to ADDR, at most c connecting at once (once FILE
//	    exists, with -start); print "established N flows in SECONDS s";
//	    hold them until -hold's FILE exists (- : until stdin closes),
//	    then close them and print "closed".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ustack-dev/ustack/internal/flowload"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "open":
		err = open(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flowload:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: flowload serve ADDR | flowload open [-n N] [-c C] [-start FILE] [-hold FILE|-] ADDR")
	os.Exit(2)
}

func serve(args []string) error {
	if len(args) != 1 {
		usage()
	}
	ln, err := flowload.Listen(args[0])
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; ln.Close() }()
	flowload.Serve(ln)
	return nil
}

func open(args []string) error {
	fs := flag.NewFlagSet("open", flag.ExitOnError)
	n := fs.Int("n", 10000, "flows to open")
	conc := fs.Int("c", 32, "flows connecting at once (stay below the relay's half-open share for one destination)")
	start := fs.String("start", "", "wait for this file to exist before opening")
	hold := fs.String("hold", "", "hold the flows until this file exists (-: until stdin closes)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	if *start != "" {
		waitFile(*start)
	}
	conns, took, err := flowload.Open(context.Background(), fs.Arg(0), *n, *conc)
	if err != nil {
		return err
	}
	fmt.Printf("established %d flows in %.3f s\n", len(conns), took.Seconds())
	switch *hold {
	case "":
	case "-":
		io.Copy(io.Discard, os.Stdin)
	default:
		waitFile(*hold)
	}
	flowload.Close(conns)
	fmt.Println("closed")
	return nil
}

// waitFile returns once path exists.
func waitFile(path string) {
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
