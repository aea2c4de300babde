package serve

import (
	"fmt"
	"net/netip"
	"strings"

	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/tun"
)

// LinkOptions tune the device OpenLink opens.
type LinkOptions struct {
	// Queues is the number of queues (PACKET_FANOUT sockets, or TUN
	// multi-queue descriptors); 0 means one.
	Queues int
	// NoOffload turns off the virtio-net header (checksum offload, GSO).
	NoOffload bool
	// MTU for a TUN device; 0 keeps its default. An AF_PACKET endpoint
	// takes the interface's.
	MTU uint32
	// PeerAddrs are assigned to a TUN device for the kernel side.
	PeerAddrs []netip.Prefix
	// Impair, if active, wraps the endpoint with fault injection (received
	// packets get all of it, sent packets all but corruption).
	Impair link.Impairments
}

// OpenLink opens the endpoint a link spec names: "afpacket:IFACE" binds to
// an existing interface, "tun:NAME" opens or creates a TUN device.
func OpenLink(spec string, o LinkOptions) (gstack.LinkEndpoint, error) {
	kind, name, ok := strings.Cut(spec, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("link %q: want afpacket:IFACE or tun:NAME", spec)
	}
	var ep gstack.LinkEndpoint
	switch kind {
	case "afpacket":
		e, err := afpacket.New(name, &afpacket.Options{Queues: o.Queues, NoOffload: o.NoOffload})
		if err != nil {
			return nil, err
		}
		ep = e
	case "tun":
		e, err := tun.Open(name, &tun.Options{Queues: o.Queues, NoOffload: o.NoOffload, MTU: o.MTU, Addrs: o.PeerAddrs})
		if err != nil {
			return nil, err
		}
		ep = e
	default:
		return nil, fmt.Errorf("link %q: unknown kind %q: valid kinds are afpacket, tun", spec, kind)
	}
	if o.Impair.Active() {
		tx := o.Impair
		tx.Corrupt = 0
		w, err := impair.Wrap(ep, impair.Options{RX: o.Impair, TX: tx})
		if err != nil {
			ep.Close()
			return nil, err
		}
		ep = w
	}
	return ep, nil
}
