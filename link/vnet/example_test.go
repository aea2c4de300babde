package vnet_test

import (
	"fmt"
	"log"

	"github.com/ustack-dev/ustack/link/vnet"
)

// A device endpoint writes a virtio-net header in front of each packet it
// sends (here a TSO request: a 64 KiB TCP super-segment the kernel cuts
// into 1448-byte segments, with a partial checksum it completes), and
// decodes and checks the one in front of each packet it receives.
func ExampleHeader_Encode() {
	h := vnet.Header{
		Flags:      vnet.FlagNeedsCsum,
		GSOType:    vnet.GSOTCPv4,
		HdrLen:     20 + 20, // IPv4 and TCP headers, no link header (TUN)
		GSOSize:    1448,
		CsumStart:  20, // the TCP header
		CsumOffset: 16, // TCP's checksum field
	}
	b := make([]byte, vnet.HeaderSize)
	h.Encode(b)
	fmt.Printf("% x\n", b)

	// The receive side: Decode, then Check against the packet length
	// before trusting any offset the header holds.
	got, err := vnet.Decode(b)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got == h, got.IsGSO(), got.Check(65000))
	fmt.Println(got.Check(30)) // the checksum would lie past the packet's end

	_, err = vnet.Decode(b[:4])
	fmt.Println(err)
	// Output:
	// 01 01 28 00 a8 05 14 00 10 00
	// true true <nil>
	// vnet: checksum at 20+16 outside a 30-byte packet
	// vnet: buffer shorter than a virtio-net header
}
