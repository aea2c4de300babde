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

	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/wgnet"
)

// Two wireguard-go devices, each with a ustack network behind it, peers
// of each other over in-memory binds: an HTTP server on one, a client on
// the other. A real program gives device.NewDevice conn.NewDefaultBind()
// and a real peer, and nothing else changes: this is wireguard-go's
// tun/netstack example with the import changed.
func Example() {
	key := func() (string, string) {
		k, _ := ecdh.X25519().GenerateKey(rand.Reader)
		return hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes())
	}
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
