package linkspec

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/impair"
	"github.com/ustack-dev/ustack/link/mem"
	"github.com/ustack-dev/ustack/link/tun"
)

// Kind is the kind of link a spec names.
type Kind string

// The kinds of link a spec can name.
const (
	// AFPacket is an existing interface, through AF_PACKET sockets
	// (package afpacket): "afpacket:IFACE".
	AFPacket Kind = "afpacket"
	// Tun is a TUN device, opened or created (package tun): "tun:NAME".
	Tun Kind = "tun"
	// Mem is an in-memory NIC pair (package mem): "mem". It has no name.
	Mem Kind = "mem"
)

// Usage is the accepted spec syntax, for flag help and error messages.
const Usage = "afpacket:IFACE, tun:NAME or mem"

// Spec is a parsed link spec.
type Spec struct {
	Kind Kind
	// Name is the interface (afpacket) or device (tun); "" for mem.
	Name string
}

// String returns the spec in the form Parse reads.
func (s Spec) String() string {
	if s.Kind == Mem {
		return string(Mem)
	}
	return string(s.Kind) + ":" + s.Name
}

// Device reports whether the spec names a kernel device (afpacket or tun),
// which Open opens, rather than a mem pair, which OpenPair opens.
func (s Spec) Device() bool { return s.Kind == AFPacket || s.Kind == Tun }

// ifNameMax is the longest interface name Linux takes (IFNAMSIZ - 1).
const ifNameMax = 15

// validIfName reports whether Linux would take name for an interface: the
// rules of the kernel's dev_valid_name.
func validIfName(name string) bool {
	if len(name) > ifNameMax || name == "." || name == ".." {
		return false
	}
	return !strings.ContainsFunc(name, func(r rune) bool {
		return r == '/' || r == ':' || r == 0 || unicode.IsSpace(r)
	})
}

// Parse reads a link spec: afpacket:IFACE, tun:NAME or mem. The error
// names the spec and says what is valid.
func Parse(spec string) (Spec, error) {
	kind, name, hasName := strings.Cut(spec, ":")
	switch Kind(kind) {
	case AFPacket, Tun:
		if name == "" {
			return Spec{}, fmt.Errorf("link %q: %s needs an interface name (%s:NAME); valid specs are %s", spec, kind, kind, Usage)
		}
		if !validIfName(name) {
			return Spec{}, fmt.Errorf("link %q: %q is not an interface name: at most %d bytes, not . or .., no '/', ':', spaces or NUL", spec, name, ifNameMax)
		}
		return Spec{Kind: Kind(kind), Name: name}, nil
	case Mem:
		if hasName {
			return Spec{}, fmt.Errorf("link %q: mem takes no name; valid specs are %s", spec, Usage)
		}
		return Spec{Kind: Mem}, nil
	case "":
		return Spec{}, fmt.Errorf("link %q: empty kind; valid specs are %s", spec, Usage)
	default:
		return Spec{}, fmt.Errorf("link %q: unknown kind %q; valid specs are %s", spec, kind, Usage)
	}
}

// Options tune what Open and OpenPair open. A nil *Options means the
// devices' defaults and no faults.
type Options struct {
	// AFPacket tunes an afpacket link; nil means afpacket's defaults.
	AFPacket *afpacket.Options
	// Tun tunes a tun link; nil means tun's defaults.
	Tun *tun.Options
	// Mem tunes a mem pair; nil means mem's defaults.
	Mem *mem.Options
	// Impair, if active, wraps the endpoint with package impair: a device
	// both ways (corruption on receive only, where impair applies it), a
	// mem pair on each end's receive (see OpenPair).
	Impair link.Impairments
}

// ErrPair is returned by Open for a mem spec: a mem link is two endpoints,
// which OpenPair opens.
var ErrPair = errors.New("a mem link is a pair of endpoints: open it with linkspec.OpenPair")

// Open opens the device spec names (afpacket or tun) in the calling
// thread's network namespace, wrapped with o.Impair if that is active.
// The caller owns the endpoint and closes it (a stack that it is given to
// closes it). On error nothing is left open.
func Open(spec Spec, o *Options) (gstack.LinkEndpoint, error) {
	if o == nil {
		o = &Options{}
	}
	var ep gstack.LinkEndpoint
	switch spec.Kind {
	case AFPacket:
		e, err := afpacket.New(spec.Name, o.AFPacket)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", spec, err)
		}
		ep = e
	case Tun:
		e, err := tun.Open(spec.Name, o.Tun)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", spec, err)
		}
		ep = e
	case Mem:
		return nil, fmt.Errorf("link %s: %w", spec, ErrPair)
	default:
		return nil, fmt.Errorf("link %s: unknown kind %q; valid specs are %s", spec, spec.Kind, Usage)
	}
	return wrap(spec, ep, o.Impair)
}

// OpenPair opens a mem pair, the two ends of one in-memory wire, with
// o.Mem. If o.Impair is active, each end is wrapped to impair what it
// receives (impair.OnReceive), so that each direction of the wire gets
// the faults once, corruption included; the ends are then
// *impair.Endpoint, whose counts say what the wire did. The caller owns
// both endpoints. On error nothing is left open.
func OpenPair(o *Options) (a, b gstack.LinkEndpoint, err error) {
	if o == nil {
		o = &Options{}
	}
	ma, mb, err := mem.Pair(o.Mem)
	if err != nil {
		return nil, nil, fmt.Errorf("link %s: %w", Mem, err)
	}
	if !o.Impair.Active() {
		return ma, mb, nil
	}
	wa, err := impair.Wrap(ma, impair.OnReceive(o.Impair, 1))
	if err != nil {
		ma.Close()
		mb.Close()
		return nil, nil, fmt.Errorf("link %s: %w", Mem, err)
	}
	wb, err := impair.Wrap(mb, impair.OnReceive(o.Impair, 0))
	if err != nil {
		wa.Close()
		mb.Close()
		return nil, nil, fmt.Errorf("link %s: %w", Mem, err)
	}
	return wa, wb, nil
}

// wrap wraps a device endpoint with im, both ways, if it is active,
// closing ep on error.
func wrap(spec Spec, ep gstack.LinkEndpoint, im link.Impairments) (gstack.LinkEndpoint, error) {
	if !im.Active() {
		return ep, nil
	}
	w, err := impair.Wrap(ep, impair.BothWays(im))
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("link %s: %w", spec, err)
	}
	return w, nil
}
