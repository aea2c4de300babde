package wgconf

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// Marshal renders c as a wg-quick configuration file, private and
// preshared keys included: handle it as the secret it is. A Config that
// Parse returned parses back from it to the same Config.
func (c Config) Marshal() []byte { return []byte(c.render(false)) }

// String renders c as a configuration file with its private and
// preshared keys replaced by "(redacted)": for logs and messages.
func (c Config) String() string { return c.render(true) }

// GoString is String in Go syntax, keys redacted.
func (c Config) GoString() string {
	return fmt.Sprintf("wgconf.Config{Interface:%#v, Peers:%#v}", c.Interface, c.Peers)
}

// Format implements fmt.Formatter: %#v is GoString, every other verb
// String, so that no verb prints a secret key.
func (c Config) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, c.GoString())
		return
	}
	io.WriteString(f, c.String())
}

// render writes c in wg-quick's format, each key once, lists on one
// line, with the secret keys redacted or not.
func (c Config) render(redact bool) string {
	var b strings.Builder
	secret := func(k SecretKey) string {
		if redact {
			return redacted
		}
		return Key(k).String()
	}
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, v) }
	list := func(k string, items []string) {
		if len(items) > 0 {
			kv(k, strings.Join(items, ", "))
		}
	}
	num := func(k string, n uint64) {
		if n != 0 {
			kv(k, strconv.FormatUint(n, 10))
		}
	}
	in := c.Interface
	b.WriteString("[Interface]\n")
	kv("PrivateKey", secret(in.PrivateKey))
	num("ListenPort", uint64(in.ListenPort))
	num("FwMark", uint64(in.FwMark))
	list("Address", strs(in.Addresses))
	list("DNS", append(strs(in.DNS), in.DNSSearch...))
	num("MTU", uint64(in.MTU))
	for _, p := range c.Peers {
		b.WriteString("\n[Peer]\n")
		kv("PublicKey", p.PublicKey.String())
		if !p.PresharedKey.IsZero() {
			kv("PresharedKey", secret(p.PresharedKey))
		}
		list("AllowedIPs", strs(p.AllowedIPs))
		if !p.Endpoint.IsZero() {
			kv("Endpoint", p.Endpoint.String())
		}
		num("PersistentKeepalive", uint64(p.PersistentKeepalive))
	}
	return b.String()
}

func strs[T fmt.Stringer](v []T) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = x.String()
	}
	return s
}

// UAPI renders c as the configuration wireguard-go's device.IpcSet
// takes: the interface's private key and, if set, listen port and
// firewall mark; replace_peers; then each peer with its key, preshared
// key, endpoint, keepalive and allowed IPs (replacing any it had). The
// result holds the private and preshared keys: hand it to IpcSet and
// drop it.
//
// An endpoint given as a host name is looked up with resolve, whose
// address goes into the configuration; with resolve nil such a peer is
// an error naming the peer. Address, DNS and MTU are not
// wireguard-go's to know: the caller gives them to the network behind
// the device (package wgnet).
func (c Config) UAPI(resolve func(host string) (netip.Addr, error)) (string, error) {
	var b strings.Builder
	kv := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	in := c.Interface
	kv("private_key", hex.EncodeToString(in.PrivateKey[:]))
	if in.ListenPort != 0 {
		kv("listen_port", strconv.Itoa(int(in.ListenPort)))
	}
	if in.FwMark != 0 {
		kv("fwmark", strconv.FormatUint(uint64(in.FwMark), 10))
	}
	kv("replace_peers", "true")
	for i, p := range c.Peers {
		kv("public_key", hex.EncodeToString(p.PublicKey[:]))
		if !p.PresharedKey.IsZero() {
			kv("preshared_key", hex.EncodeToString(p.PresharedKey[:]))
		}
		if !p.Endpoint.IsZero() {
			ap, ok := p.Endpoint.AddrPort()
			if !ok {
				if resolve == nil {
					return "", fmt.Errorf("wgconf: peer %d (public key %s): its endpoint is a host name, %s: give UAPI a resolver", i+1, p.PublicKey, p.Endpoint.Host)
				}
				a, err := resolve(p.Endpoint.Host)
				if err != nil {
					return "", fmt.Errorf("wgconf: peer %d (public key %s): resolve its endpoint %s: %w", i+1, p.PublicKey, p.Endpoint.Host, err)
				}
				if !a.IsValid() {
					return "", fmt.Errorf("wgconf: peer %d (public key %s): the resolver gave no address for %s", i+1, p.PublicKey, p.Endpoint.Host)
				}
				ap = netip.AddrPortFrom(a.Unmap(), p.Endpoint.Port)
			}
			kv("endpoint", ap.String())
		}
		if p.PersistentKeepalive != 0 {
			kv("persistent_keepalive_interval", strconv.Itoa(int(p.PersistentKeepalive)))
		}
		kv("replace_allowed_ips", "true")
		for _, a := range p.AllowedIPs {
			kv("allowed_ip", a.String())
		}
	}
	return b.String(), nil
}
