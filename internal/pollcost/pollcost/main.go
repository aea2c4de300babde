// Command pollcost relays TCP connections with package internal/pollcost,
// for scripts/pollcost.sh: every connection accepted on -listen is relayed
// to -to, in -mode poller (Go's poller) or loop (an epoll of its own).
//
//	pollcost -mode poller|loop [-procs 1] -listen ADDR -to ADDR
//
// It prints "listening HOST:PORT" once ready and runs until SIGINT or
// SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/ustack-dev/ustack/internal/pollcost"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	modeName := flag.String("mode", string(pollcost.ModePoller), "how the relay waits: poller (Go's poller) or loop (an epoll of its own)")
	procs := flag.Int("procs", 1, "GOMAXPROCS (1, as ustack tun runs its relay)")
	listen := flag.String("listen", "127.0.0.1:0", "address to accept connections on")
	to := flag.String("to", "", "address to relay each connection to (required)")
	flag.Parse()
	mode, err := pollcost.ParseMode(*modeName)
	if err != nil {
		return err
	}
	if *to == "" {
		return fmt.Errorf("pollcost: -to is required: the address to relay to")
	}
	if *procs < 1 {
		return fmt.Errorf("pollcost: -procs %d: want 1 or more", *procs)
	}
	runtime.GOMAXPROCS(*procs)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("pollcost: %w", err)
	}
	fmt.Println("listening", ln.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil // closed by the signal
		}
		go relay(c.(*net.TCPConn), *to, mode)
	}
}

// relay connects to addr and relays c there, reporting a failure.
func relay(c *net.TCPConn, addr string, mode pollcost.Mode) {
	s, err := net.Dial("tcp", addr)
	if err != nil {
		c.Close()
		fmt.Fprintln(os.Stderr, "pollcost:", err)
		return
	}
	if err := pollcost.Relay(c, s.(*net.TCPConn), mode); err != nil {
		fmt.Fprintln(os.Stderr, "pollcost: relay:", err)
	}
}
