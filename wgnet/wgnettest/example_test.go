package wgnettest_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgnettest"
)

// A whole WireGuard tunnel in a test, with no socket and no root: two
// wgnet networks behind two wireguard-go devices that Pair joins, and a
// TCP connection through it.
func ExamplePair() {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	tunA, netA, err := wgnet.CreateNetTUN([]netip.Addr{a}, nil, 1420)
	if err != nil {
		fmt.Println(err)
		return
	}
	tunB, netB, err := wgnet.CreateNetTUN([]netip.Addr{b}, nil, 1420)
	if err != nil {
		tunA.Close()
		fmt.Println(err)
		return
	}
	devA, devB, err := wgnettest.Pair(tunA, tunB, a, b, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devA.Close() // closes tunA and netA
	defer devB.Close()

	ln, err := netB.ListenTCPAddrPort(netip.AddrPortFrom(b, 80))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "hello from b")
		c.Close()
	}()
	c, err := netA.DialTCPAddrPort(netip.AddrPortFrom(b, 80))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	got, _ := io.ReadAll(c)
	fmt.Println(string(got), c.RemoteAddr().(*net.TCPAddr).AddrPort())
	// Output: hello from b 198.18.0.2:80
}
