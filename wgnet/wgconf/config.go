package wgconf

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// KeyLen is the length in bytes of every WireGuard key: Curve25519 keys
// and the preshared symmetric key alike.
const KeyLen = 32

// Key is a public key. It prints in base64, as wg(8) shows it.
type Key [KeyLen]byte

// String returns k in base64.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// IsZero reports whether k is all zeros (no key).
func (k Key) IsZero() bool { return k == Key{} }

// redacted is what a secret key prints as.
const redacted = "(redacted)"

// SecretKey is a private or preshared key. It never prints: String,
// GoString and every fmt verb show "(redacted)", so a Config may be
// logged whole. Its bytes are k[:].
type SecretKey [KeyLen]byte

// String returns "(redacted)".
func (SecretKey) String() string { return redacted }

// GoString returns "(redacted)".
func (SecretKey) GoString() string { return redacted }

// Format implements fmt.Formatter: "(redacted)" whatever the verb, so
// that %x or %d do not print the bytes either.
func (SecretKey) Format(f fmt.State, _ rune) { fmt.Fprint(f, redacted) }

// IsZero reports whether k is all zeros (no key).
func (k SecretKey) IsZero() bool { return k == SecretKey{} }

// Config is a parsed configuration file. Its String, GoString and Format
// redact the private and preshared keys; Marshal does not.
type Config struct {
	Interface Interface
	Peers     []Peer
}

// Interface is the [Interface] section.
type Interface struct {
	// PrivateKey is the interface's private key; required.
	PrivateKey SecretKey
	// ListenPort is the UDP port to listen on; 0 lets wireguard-go
	// choose one.
	ListenPort uint16
	// FwMark marks the packets of the UDP sockets (SO_MARK); 0 is none.
	FwMark uint32
	// Addresses are the interface's addresses, each with the prefix
	// length written (a bare address is a host prefix), in file order.
	Addresses []netip.Prefix
	// DNS are the DNS servers' addresses, and DNSSearch the search
	// domains, which wg-quick's DNS key also takes, in file order.
	DNS       []netip.Addr
	DNSSearch []string
	// MTU is the tunnel's MTU; 0 means the caller's default.
	MTU int
}

// Peer is a [Peer] section.
type Peer struct {
	// PublicKey identifies the peer; required, and unique in a file.
	PublicKey Key
	// PresharedKey adds a symmetric key to the handshake; zero is none.
	PresharedKey SecretKey
	// AllowedIPs are the addresses the peer may send from and is sent
	// to, as written (not masked), in file order.
	AllowedIPs []netip.Prefix
	// Endpoint is where to reach the peer; its zero value is none (the
	// peer is learnt from its first handshake).
	Endpoint Endpoint
	// PersistentKeepalive is the keepalive interval in seconds; 0 is off.
	PersistentKeepalive uint16
}

// Endpoint is a peer's address: a host, unresolved, and a port.
type Endpoint struct {
	// Host is an IP address (IPv6 without brackets, perhaps with a
	// zone) or a host name, which the caller resolves (Config.UAPI
	// takes a resolver).
	Host string
	Port uint16
}

// IsZero reports whether e is unset.
func (e Endpoint) IsZero() bool { return e == Endpoint{} }

// String returns e as host:port, an IPv6 address in brackets.
func (e Endpoint) String() string {
	if e.IsZero() {
		return ""
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// AddrPort returns e as an address and port, and false if its host is a
// name to resolve.
func (e Endpoint) AddrPort() (netip.AddrPort, bool) {
	a, err := netip.ParseAddr(e.Host)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a, e.Port), true
}
