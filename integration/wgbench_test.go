//go:build linux

package integration

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/ustack-dev/ustack/wgnet"
)

// The WireGuard client benchmark of scripts/wg.sh: the test binary, as
// the sandbox-side programs are (childEnv), plays a WireGuard client of
// a real peer ("wgclient"), with wgnet or wireguard-go's own netstack
// behind the same wireguard-go device and UDP bind, or the server behind
// that peer ("wgserver").
//
//	wgserver ADDR:PORT
//	    serve the client's tests until killed: each connection sends one
//	    line, "download N", "upload N" or "rr N".
//	wgclient -stack wgnet|netstack -key PRIV -peer PUB -endpoint IP:PORT
//	         -addr IP -server IP:PORT -test download|upload|rr -n N
//	    run one test (N bytes, or N round trips of one byte) and print
//	    one line of JSON: wgClientResult. -stack host has no tunnel of
//	    its own (no -key, -peer, -endpoint, -addr): it runs inside a
//	    ustack tun -wg sandbox, whose network is one.

// wgClientResult is what one client test measured: its bytes or round
// trips, the wall time, and this process's CPU time (user and system,
// getrusage) over the same span.
type wgClientResult struct {
	Stack      string  `json:"stack"`
	Test       string  `json:"test"`
	Bytes      int64   `json:"bytes"`
	RoundTrips int     `json:"round_trips"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// wgServerChild serves the client's tests on addr until killed.
func wgServerChild(args []string) (string, error) {
	if len(args) != 1 {
		return "", errors.New("wgserver ADDR:PORT")
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return "", err
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return "", err
		}
		go serveWGBench(c)
	}
}

// serveWGBench answers one connection's test.
func serveWGBench(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	test, count, _ := strings.Cut(strings.TrimSpace(line), " ")
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		return
	}
	switch test {
	case "download":
		io.Copy(c, io.LimitReader(zeros{}, n))
	case "upload":
		got, _ := io.Copy(io.Discard, r)
		fmt.Fprintf(c, "%d\n", got)
	case "rr":
		var b [1]byte
		for range n {
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return
			}
			if _, err := c.Write(b[:]); err != nil {
				return
			}
		}
	}
}

// zeros reads as endless zero bytes: the tunnel encrypts them, so they
// cost what any bytes do.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// b64hex turns a base64 key (wg genkey) into hex (IpcSet).
func b64hex(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("key: not a base64 WireGuard key")
	}
	return hex.EncodeToString(b), nil
}

// wgClientChild runs one test as a WireGuard client of a real peer.
func wgClientChild(args []string) (string, error) {
	fs := flag.NewFlagSet("wgclient", flag.ContinueOnError)
	var (
		stackName = fs.String("stack", "wgnet", "wgnet or netstack; host: no tunnel, this process's own network (a ustack tun -wg sandbox)")
		key       = fs.String("key", "", "the client's private key (base64)")
		peer      = fs.String("peer", "", "the peer's public key (base64)")
		endpoint  = fs.String("endpoint", "", "the peer's endpoint IP:PORT")
		addr      = fs.String("addr", "", "the client's tunnel address")
		server    = fs.String("server", "", "the wgserver's IP:PORT, behind the peer")
		test      = fs.String("test", "download", "download, upload or rr")
		n         = fs.Int64("n", 256<<20, "bytes, or round trips for rr")
		mtu       = fs.Int("mtu", 1420, "the tunnel's MTU")
	)
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	var priv, pub string
	var local netip.Addr
	var err error
	if *stackName != "host" {
		if priv, err = b64hex(*key); err != nil {
			return "", err
		}
		if pub, err = b64hex(*peer); err != nil {
			return "", err
		}
		if local, err = netip.ParseAddr(*addr); err != nil {
			return "", err
		}
	}
	var tdev tun.Device
	var dial func(ctx context.Context, network, address string) (net.Conn, error)
	switch *stackName {
	case "host":
		// No tunnel of its own: this process's network is one already,
		// such as a sandbox of ustack tun -wg.
		dial = (&net.Dialer{}).DialContext
	case "wgnet":
		d, tn, err := wgnet.CreateNetTUN([]netip.Addr{local}, nil, *mtu)
		if err != nil {
			return "", err
		}
		tdev, dial = d, tn.DialContext
	case "netstack":
		d, tn, err := netstack.CreateNetTUN([]netip.Addr{local}, nil, *mtu)
		if err != nil {
			return "", err
		}
		tdev, dial = d, tn.DialContext
	default:
		return "", fmt.Errorf("-stack %q: wgnet, netstack or host", *stackName)
	}
	if tdev != nil {
		dev := device.NewDevice(tdev, conn.NewStdNetBind(), &device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf})
		defer dev.Close()
		if err := dev.IpcSet(fmt.Sprintf("private_key=%s\npublic_key=%s\nendpoint=%s\nallowed_ip=0.0.0.0/0\n", priv, pub, *endpoint)); err != nil {
			return "", err
		}
		if err := dev.Up(); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A few round trips first: the handshake and the connection's start
	// are not the test's.
	if err := wgRR(ctx, dial, *server, 10); err != nil {
		return "", fmt.Errorf("warm-up: %w", err)
	}
	res := wgClientResult{Stack: *stackName, Test: *test}
	c, err := dial(ctx, "tcp", *server)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	if _, err := fmt.Fprintf(c, "%s %d\n", *test, *n); err != nil {
		return "", err
	}
	start, cpu0 := time.Now(), cpuTime()
	switch *test {
	case "download":
		res.Bytes, err = io.Copy(io.Discard, c)
		if err == nil && res.Bytes != *n {
			err = fmt.Errorf("downloaded %d bytes of %d", res.Bytes, *n)
		}
	case "upload":
		res.Bytes, err = io.Copy(c, io.LimitReader(zeros{}, *n))
		if err == nil {
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		if err == nil {
			var got int64
			_, err = fmt.Fscanf(c, "%d\n", &got)
			if err == nil && got != *n {
				err = fmt.Errorf("the server got %d bytes of %d", got, *n)
			}
		}
	case "rr":
		var b [1]byte
		for i := int64(0); i < *n && err == nil; i++ {
			if _, err = c.Write(b[:]); err == nil {
				_, err = io.ReadFull(c, b[:])
			}
		}
		res.RoundTrips = int(*n)
	default:
		return "", fmt.Errorf("-test %q: download, upload or rr", *test)
	}
	if err != nil {
		return "", err
	}
	res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds()
	out, err := json.Marshal(res)
	return string(out) + "\n", err
}

// wgRR runs n round trips of one byte with the server, on a connection
// of its own.
func wgRR(ctx context.Context, dial func(ctx context.Context, network, address string) (net.Conn, error), server string, n int) error {
	c, err := dial(ctx, "tcp", server)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "rr %d\n", n); err != nil {
		return err
	}
	var b [1]byte
	for range n {
		if _, err := c.Write(b[:]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return err
		}
	}
	return nil
}
