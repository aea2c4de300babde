package forward_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// proxy is a transparent proxy: it sees each connection's original
// destination before the handshake, connects upstream first (here always
// to one server, as a proxy that steers traffic would), and only then
// accepts, so a peer whose upstream is down gets a reset.
type proxy struct{ upstream string }

func (p proxy) HandleTCP(req *forward.TCPRequest) {
	up, err := (&net.Dialer{}).DialContext(req.Context(), "tcp", p.upstream)
	if err != nil {
		req.Reject(true)
		return
	}
	c, err := req.Accept()
	if err != nil {
		up.Close()
		return
	}
	fmt.Fprintf(up, "for %v: ", req.Dst())
	forward.Splice(c, up)
}

func (proxy) HandleUDP(u *forward.UDPFlow) { u.Close() } // TCP only

// Example_transparentProxy intercepts every TCP connection host A makes
// through host B.
func Example_transparentProxy() {
	// The upstream: a host server that answers with what it got.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	// Hosts A and B over an in-memory link; A routes 203.0.113.0/24
	// through B, which intercepts it.
	p, err := stacktest.Build(&stacktest.Options{Stack: &stack.Options{Transparent: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.A.AddRoute(netip.MustParsePrefix("203.0.113.0/24"), stacktest.B4, 1); err != nil {
		log.Fatal(err)
	}
	fw, err := forward.New(p.B, proxy{upstream: ln.Addr().String()}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer fw.Close()

	c, err := p.A.DialTCP(context.Background(), netip.MustParseAddrPort("203.0.113.7:80"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "hello")
	c.CloseWrite()
	b, _ := io.ReadAll(c)
	fmt.Println(string(b))
	// Output: for 203.0.113.7:80: hello
}

// Example_hostRelay relays host A's flows through host B to the host's
// own sockets, as a sandbox does: 203.0.113.1 stands for the host's
// loopback, 203.0.113.128/25 is denied, and everything else would be
// dialed on the host.
func Example_hostRelay() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "hello from the host")
	}()

	p, err := stacktest.Build(&stacktest.Options{Stack: &stack.Options{Transparent: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.A.AddRoute(netip.MustParsePrefix("203.0.113.0/24"), stacktest.B4, 1); err != nil {
		log.Fatal(err)
	}
	gateway := netip.MustParseAddr("203.0.113.1")
	relay := forward.Relay(&net.Dialer{}, &forward.Policy{
		HostLoopback:      []netip.Addr{gateway},
		AllowHostLoopback: true,
		Deny:              []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")},
	})
	fw, err := forward.New(p.B, relay, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer fw.Close()

	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	c, err := p.A.DialTCP(context.Background(), netip.AddrPortFrom(gateway, port))
	if err != nil {
		log.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	fmt.Println(string(b))
	// A denied destination is refused (a reset) and counted.
	_, err = p.A.DialTCP(context.Background(), netip.MustParseAddrPort("203.0.113.200:80"))
	fmt.Println(err != nil, fw.Stats().Refused[forward.Denied])
	// Output:
	// hello from the host
	// true 1
}
