package wgnet_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/wgnet"
)

// Two wireguard-go devices, each with a ustack network behind it, peers
// of each other over in-memory binds: an HTTP server on one, a client on
// the other. A real program gives device.NewDevice conn.NewDefaultBind()
// and a real peer, and nothing else changes: this is wireguard-go's
// tun/netstack example with the import changed.
func Example() {
	privA, pubA := key()
	privB, pubB := key()
	binds := bindtest.NewChannelBinds()

	tunA, tnetA, err := wgnet.CreateNetTUN([]netip.Addr{netip.MustParseAddr("198.18.0.1")}, nil, 1420)
	if err != nil {
		fmt.Println(err)
		return
	}
	devA := device.NewDevice(tunA, binds[0], device.NewLogger(device.LogLevelError, ""))
	devA.IpcSet("private_key=" + privA + "\npublic_key=" + pubB + "\nendpoint=127.0.0.1:1\nallowed_ip=198.18.0.2/32\n")
	devA.Up()
	defer devA.Close() // closes tunA and the network behind it

	tunB, tnetB, _ := wgnet.CreateNetTUN([]netip.Addr{netip.MustParseAddr("198.18.0.2")}, nil, 1420)
	devB := device.NewDevice(tunB, binds[1], device.NewLogger(device.LogLevelError, ""))
	devB.IpcSet("private_key=" + privB + "\npublic_key=" + pubA + "\nendpoint=127.0.0.1:2\nallowed_ip=198.18.0.1/32\n")
	devB.Up()
	defer devB.Close()

	listener, _ := tnetB.ListenTCP(&net.TCPAddr{Port: 80})
	defer listener.Close()
	go http.Serve(listener, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello through the tunnel")
	}))

	client := http.Client{Transport: &http.Transport{DialContext: tnetA.DialContext}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://198.18.0.2/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: hello through the tunnel
}

// An exit node that needs no root: a wireguard-go device whose network is
// a transparent wgnet stack, with package forward relaying every flow
// its peers send to the host's own sockets. Here the "internet" is a TCP
// and a UDP service on the host's loopback, which the peer reaches at
// 198.18.255.254, the address the Policy says stands for the exit
// host's loopback. The peer is a wgnet client whose every packet goes to
// the exit node (allowed_ip=0.0.0.0/0); both devices run in this process
// over in-memory binds, where a real exit node has conn.NewDefaultBind().
func Example_exitNode() {
	services := startLoopbackServices()
	defer services.Close()

	privExit, pubExit := key()
	privClient, pubClient := key()
	binds := bindtest.NewChannelBinds()
	quiet := device.NewLogger(device.LogLevelError, "")

	// The exit node.
	gateway := netip.MustParseAddr("198.18.255.254")
	exitTUN, exitNet, err := wgnet.CreateNetTUNWithOptions([]netip.Addr{netip.MustParseAddr("198.18.0.1")}, nil, 1420, &wgnet.Options{Transparent: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	exit := device.NewDevice(exitTUN, binds[0], quiet)
	defer exit.Close() // last: closes exitTUN and its stack
	exit.IpcSet("private_key=" + privExit + "\npublic_key=" + pubClient + "\nendpoint=127.0.0.1:1\nallowed_ip=198.18.0.2/32\n")
	exit.Up()
	policy := &forward.Policy{HostLoopback: []netip.Addr{gateway}, AllowHostLoopback: true}
	fw, err := forward.New(exitNet.Stack(), forward.Relay(&net.Dialer{}, policy), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fw.Close()

	// The client.
	clientTUN, clientNet, _ := wgnet.CreateNetTUN([]netip.Addr{netip.MustParseAddr("198.18.0.2")}, nil, 1420)
	client := device.NewDevice(clientTUN, binds[1], quiet)
	defer client.Close()
	client.IpcSet("private_key=" + privClient + "\npublic_key=" + pubExit + "\nendpoint=127.0.0.1:2\nallowed_ip=0.0.0.0/0\n")
	client.Up()

	c, err := clientNet.Dial("tcp", netip.AddrPortFrom(gateway, services.tcpPort).String())
	if err != nil {
		fmt.Println(err)
		return
	}
	io.WriteString(c, "over tcp")
	c.(wgnet.TCPConn).CloseWrite()
	reply, _ := io.ReadAll(c)
	c.Close()
	fmt.Println(string(reply))

	u, err := clientNet.Dial("udp", netip.AddrPortFrom(gateway, services.udpPort).String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer u.Close()
	u.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(u, "over udp")
	buf := make([]byte, 64)
	n, err := u.Read(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(buf[:n]))
	// Output:
	// the host got "over tcp"
	// the host got "over udp"
}

// key returns a fresh X25519 private key and its public key, in hex as
// wireguard-go's IpcSet takes them.
func key() (private, public string) {
	k, _ := ecdh.X25519().GenerateKey(rand.Reader)
	return hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes())
}

// loopbackServices are a TCP and a UDP service on the host's loopback
// that answer `the host got "<what they got>"`.
type loopbackServices struct {
	tcp              net.Listener
	udp              net.PacketConn
	tcpPort, udpPort uint16
	done             sync.WaitGroup
}

func startLoopbackServices() *loopbackServices {
	s := &loopbackServices{}
	s.tcp, _ = net.Listen("tcp", "127.0.0.1:0")
	s.udp, _ = net.ListenPacket("udp", "127.0.0.1:0")
	s.tcpPort = uint16(s.tcp.Addr().(*net.TCPAddr).Port)
	s.udpPort = uint16(s.udp.LocalAddr().(*net.UDPAddr).Port)
	s.done.Go(func() {
		for {
			c, err := s.tcp.Accept()
			if err != nil {
				return
			}
			got, _ := io.ReadAll(c)
			fmt.Fprintf(c, "the host got %q", got)
			c.Close()
		}
	})
	s.done.Go(func() {
		buf := make([]byte, 64)
		for {
			n, from, err := s.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			s.udp.WriteTo(fmt.Appendf(nil, "the host got %q", buf[:n]), from)
		}
	})
	return s
}

// Close stops the services and waits for their goroutines.
func (s *loopbackServices) Close() error {
	s.tcp.Close()
	s.udp.Close()
	s.done.Wait()
	return nil
}

// A sandbox whose only network is a WireGuard tunnel, as ustack tun -wg
// runs it: the relay dials every flow of the sandboxed command through
// the tunnel's Dialer (TCP, UDP and pings), and its DNS queries go
// through the tunnel to the VPN's resolver. The device is configured as
// any wireguard-go device is: here with a peer that is the exit for
// every address. (Not run: a sandbox needs a namespace, and a real peer.)
func ExampleNet_Dialer() {
	sandbox.Init() // first thing in main: the sandbox's helper process
	tunDev, tnet, err := wgnet.CreateNetTUN([]netip.Addr{netip.MustParseAddr("10.64.0.2")}, nil, 1420)
	if err != nil {
		fmt.Println(err)
		return
	}
	dev := device.NewDevice(tunDev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "wg: "))
	defer dev.Close() // after the sandbox: it carries the sandbox's flows
	if err := dev.IpcSet("private_key=...\npublic_key=...\nendpoint=203.0.113.1:51820\nallowed_ip=0.0.0.0/0\nallowed_ip=::/0\n"); err != nil {
		fmt.Println(err)
		return
	}
	if err := dev.Up(); err != nil {
		fmt.Println(err)
		return
	}
	sb, err := sandbox.New(&sandbox.Config{
		Dialer:      tnet.Dialer(),
		DNSUpstream: netip.MustParseAddrPort("10.64.0.1:53"), // the VPN's resolver, through the tunnel
		ResolvConf:  true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()
	cmd := exec.Command("curl", "-sS", "http://10.64.0.1/")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := sb.Run(cmd, nil); err != nil {
		fmt.Println(err)
	}
}
