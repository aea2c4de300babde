package wgconf

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ParseError is what is wrong with a configuration file: where and in
// which key, never with the value, which may be a secret.
type ParseError struct {
	// Line is the line's number, from 1; for something missing at the
	// end of the file, the number of the line after the last.
	Line int
	// Key is the key (its canonical spelling, such as PrivateKey) or the
	// section header ([Interface], [Peer]) that is wrong.
	Key string
	// Reason says what is wrong and what to do.
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("wgconf: line %d: %s: %s", e.Line, e.Key, e.Reason)
}

// section is where a key belongs.
type section int

const (
	none section = iota
	iface
	peer
)

func (s section) String() string {
	if s == peer {
		return "[Peer]"
	}
	return "[Interface]"
}

// keyDef is one key of the format.
type keyDef struct {
	name    string
	section section
	repeat  bool   // a list that may be given on several lines
	refused string // why the key is refused; "" if it is taken
	// set parses v into the current section and returns what is wrong
	// with it, or "". It never quotes v.
	set func(p *parser, v string) string
}

// The refusals of wg-quick's keys that ustack cannot honour.
const (
	noShell = "refused: wg-quick runs it as a shell command, and ustack runs no command " +
		"(start what it would have started beside ustack)"
	noRoutes = "refused: wg-quick installs routes with it, and ustack installs none " +
		"(the tunnel is the network of ustack's own stack; remove the line)"
	noSave = "refused: it makes wg-quick write the file back, and ustack never writes it (remove the line)"
)

// keys maps each key, lower-case, to its definition.
var keys = map[string]*keyDef{}

func init() {
	for _, d := range []*keyDef{
		{name: "PrivateKey", section: iface, set: func(p *parser, v string) string {
			k, why := parseKey(v, false)
			p.cfg.Interface.PrivateKey = SecretKey(k)
			return why
		}},
		{name: "ListenPort", section: iface, set: func(p *parser, v string) string {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return "not a port number (0 to 65535; 0 or no ListenPort lets wireguard-go choose)"
			}
			p.cfg.Interface.ListenPort = uint16(n)
			return ""
		}},
		{name: "FwMark", section: iface, set: func(p *parser, v string) string {
			m, ok := parseFwMark(v)
			if !ok {
				return `not a firewall mark (a 32-bit number, decimal or 0x hexadecimal, or "off")`
			}
			p.cfg.Interface.FwMark = m
			return ""
		}},
		{name: "Address", section: iface, repeat: true, set: func(p *parser, v string) string {
			return parseList(v, func(item string) string {
				pfx, ok := parsePrefix(item)
				if !ok {
					return "an item is not an IP address or CIDR prefix (such as 10.0.0.2/24 or fd00::2/64)"
				}
				p.cfg.Interface.Addresses = append(p.cfg.Interface.Addresses, pfx)
				return ""
			})
		}},
		{name: "DNS", section: iface, repeat: true, set: func(p *parser, v string) string {
			return parseList(v, func(item string) string {
				if a, err := netip.ParseAddr(item); err == nil {
					p.cfg.Interface.DNS = append(p.cfg.Interface.DNS, a)
					return ""
				}
				if !IsHostName(item) {
					return "an item is neither an IP address (a server) nor a domain name (a search domain)"
				}
				p.cfg.Interface.DNSSearch = append(p.cfg.Interface.DNSSearch, item)
				return ""
			})
		}},
		{name: "MTU", section: iface, set: func(p *parser, v string) string {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n < minMTU {
				return fmt.Sprintf("not an MTU (%d to 65535 bytes)", minMTU)
			}
			p.cfg.Interface.MTU = int(n)
			return ""
		}},
		{name: "Table", section: iface, refused: noRoutes},
		{name: "PreUp", section: iface, refused: noShell},
		{name: "PostUp", section: iface, refused: noShell},
		{name: "PreDown", section: iface, refused: noShell},
		{name: "PostDown", section: iface, refused: noShell},
		{name: "SaveConfig", section: iface, refused: noSave},

		{name: "PublicKey", section: peer, set: func(p *parser, v string) string {
			k, why := parseKey(v, false)
			p.peer().PublicKey = Key(k)
			return why
		}},
		{name: "PresharedKey", section: peer, set: func(p *parser, v string) string {
			k, why := parseKey(v, true)
			p.peer().PresharedKey = SecretKey(k)
			return why
		}},
		{name: "AllowedIPs", section: peer, repeat: true, set: func(p *parser, v string) string {
			return parseList(v, func(item string) string {
				pfx, ok := parsePrefix(item)
				if !ok {
					return "an item is not an IP address or CIDR prefix (such as 10.0.0.0/24 or ::/0)"
				}
				p.peer().AllowedIPs = append(p.peer().AllowedIPs, pfx)
				return ""
			})
		}},
		{name: "Endpoint", section: peer, set: func(p *parser, v string) string {
			e, why := parseEndpoint(v)
			p.peer().Endpoint = e
			return why
		}},
		{name: "PersistentKeepalive", section: peer, set: func(p *parser, v string) string {
			if strings.EqualFold(v, "off") {
				p.peer().PersistentKeepalive = 0
				return ""
			}
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return `not an interval (seconds, 1 to 65535, or "off")`
			}
			p.peer().PersistentKeepalive = uint16(n)
			return ""
		}},
	} {
		keys[strings.ToLower(d.name)] = d
	}
}

// minMTU is the smallest MTU Parse takes: IPv4's minimum (RFC 791), the
// smallest a kernel interface takes. The endpoint using the file may
// need more (package link/pktio takes 1280 and up, IPv6's minimum).
const minMTU = 68

// parser is Parse's state.
type parser struct {
	cfg       Config
	section   section
	ifaceLine int            // the [Interface] header's line; 0 before it
	peerLines []int          // each peer's [Peer] header line
	seen      map[string]int // keys of the current section -> first line
}

func (p *parser) peer() *Peer { return &p.cfg.Peers[len(p.cfg.Peers)-1] }

// Parse reads a configuration file in wg-quick's format (see the package
// documentation). A *ParseError says what is wrong, with the line and
// the key, never the value.
func Parse(data []byte) (*Config, error) {
	p := parser{seen: map[string]int{}}
	lines := strings.Split(strings.TrimPrefix(string(data), "\uFEFF"), "\n")
	for i, line := range lines {
		if err := p.line(i+1, line); err != nil {
			return nil, err
		}
	}
	if err := p.finish(len(lines)); err != nil {
		return nil, err
	}
	return &p.cfg, nil
}

func (p *parser) line(n int, line string) error {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return nil
	}
	if line[0] == '[' {
		return p.header(n, line)
	}
	name, v, ok := strings.Cut(line, "=")
	name, v = strings.TrimSpace(name), strings.TrimSpace(v)
	if !ok || name == "" {
		return &ParseError{n, shown(name), "not a section header nor Key = Value"}
	}
	d := keys[strings.ToLower(name)]
	switch {
	case d == nil:
		return &ParseError{n, shown(name), "unknown key (wg-quick's keys are PrivateKey, ListenPort, FwMark, Address, DNS, MTU; " +
			"PublicKey, PresharedKey, AllowedIPs, Endpoint, PersistentKeepalive)"}
	case p.section == none:
		return &ParseError{n, d.name, "outside a section: put it under " + d.section.String()}
	case d.section != p.section:
		return &ParseError{n, d.name, "belongs in " + d.section.String() + ", not " + p.section.String()}
	case d.refused != "":
		return &ParseError{n, d.name, d.refused}
	case v == "":
		return &ParseError{n, d.name, "no value: give one, or remove the line"}
	}
	if first, dup := p.seen[d.name]; dup && !d.repeat {
		return &ParseError{n, d.name, fmt.Sprintf("given twice in one section (first on line %d): keep one", first)}
	}
	p.seen[d.name] = n
	if why := d.set(p, v); why != "" {
		return &ParseError{n, d.name, why}
	}
	return nil
}

func (p *parser) header(n int, line string) error {
	if line[len(line)-1] != ']' {
		return &ParseError{n, "section", "a section header is [Interface] or [Peer], alone on its line"}
	}
	name := strings.TrimSpace(line[1 : len(line)-1])
	if err := p.endPeer(); err != nil {
		return err
	}
	clear(p.seen)
	switch {
	case strings.EqualFold(name, "Interface"):
		if p.ifaceLine != 0 {
			return &ParseError{n, "[Interface]", fmt.Sprintf("a second [Interface] section (the first is on line %d): merge them", p.ifaceLine)}
		}
		p.section, p.ifaceLine = iface, n
	case strings.EqualFold(name, "Peer"):
		p.section = peer
		p.cfg.Peers = append(p.cfg.Peers, Peer{})
		p.peerLines = append(p.peerLines, n)
	default:
		return &ParseError{n, "[" + shown(name) + "]", "unknown section: the sections are [Interface] and [Peer]"}
	}
	return nil
}

// endPeer checks the peer whose section ends: it has a public key that
// no peer before it has.
func (p *parser) endPeer() error {
	if p.section != peer {
		return nil
	}
	i := len(p.cfg.Peers) - 1
	k := p.cfg.Peers[i].PublicKey
	if k.IsZero() {
		return &ParseError{p.peerLines[i], "PublicKey", "missing: every [Peer] needs one"}
	}
	for j, q := range p.cfg.Peers[:i] {
		if q.PublicKey == k {
			return &ParseError{p.peerLines[i], "PublicKey", fmt.Sprintf("the same peer as the [Peer] on line %d: merge them", p.peerLines[j])}
		}
	}
	return nil
}

func (p *parser) finish(end int) error {
	if err := p.endPeer(); err != nil {
		return err
	}
	switch {
	case p.ifaceLine == 0:
		return &ParseError{end, "[Interface]", "missing: a file needs an [Interface] section with a PrivateKey"}
	case p.cfg.Interface.PrivateKey.IsZero():
		return &ParseError{p.ifaceLine, "PrivateKey", "missing from [Interface] (make one with wg genkey)"}
	}
	// A public key prints (String): one that is the private key pasted
	// on the wrong line would leak it.
	for i, q := range p.cfg.Peers {
		if q.PublicKey == Key(p.cfg.Interface.PrivateKey) {
			return &ParseError{p.peerLines[i], "PublicKey", "the interface's private key, not the peer's public key (wg pubkey prints that)"}
		}
	}
	return nil
}

// shown returns name if it looks like a key's name, for an error to
// quote; anything else could be a secret pasted on the wrong line, and
// is not shown.
func shown(name string) string {
	if name == "" {
		return "(no key)"
	}
	if len(name) > 24 {
		return "(a key not shown)"
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return "(a key not shown)"
		}
	}
	return name
}

// parseKey decodes a base64 key as wg(8) writes it: 44 characters, the
// last '=', and no bits set beyond the 32 bytes. An all-zero key is no
// key, which only a preshared key may be (zeroOK).
func parseKey(v string, zeroOK bool) ([KeyLen]byte, string) {
	var k [KeyLen]byte
	const bad = "not a base64 WireGuard key (32 bytes: 44 characters ending in '=', as wg genkey and wg pubkey print them)"
	if len(v) != base64.StdEncoding.EncodedLen(KeyLen) {
		return k, bad
	}
	var buf [KeyLen + 1]byte // base64.StdEncoding.DecodedLen of 44 characters: Decode must have room
	n, err := base64.StdEncoding.Strict().Decode(buf[:], []byte(v))
	if err != nil || n != KeyLen {
		return k, bad
	}
	copy(k[:], buf[:KeyLen])
	if !zeroOK && k == [KeyLen]byte{} {
		return k, "all zeros, which is no key"
	}
	return k, ""
}

// parseFwMark reads a mark as wg(8) does: "off", or a number in decimal
// or, after 0x, hexadecimal.
func parseFwMark(v string) (uint32, bool) {
	if strings.EqualFold(v, "off") {
		return 0, true
	}
	base := 10
	if len(v) > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X') {
		v, base = v[2:], 16
	}
	m, err := strconv.ParseUint(v, base, 32)
	return uint32(m), err == nil
}

// parseList calls item for each comma-separated item of v, and returns
// the first thing wrong.
func parseList(v string, item func(string) string) string {
	for it := range strings.SplitSeq(v, ",") {
		it = strings.TrimSpace(it)
		if it == "" {
			return "an empty item in the list (two commas, or one at an end)"
		}
		if why := item(it); why != "" {
			return why
		}
	}
	return ""
}

// parsePrefix reads a CIDR prefix as written (not masked), or a bare
// address as the prefix of that one address. Zones are refused: a
// prefix has none.
func parsePrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		return pfx, err == nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// parseEndpoint reads host:port, an IPv6 address in brackets. An IP
// address is kept in its canonical form; a host name is kept as written,
// unresolved.
func parseEndpoint(v string) (Endpoint, string) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		if strings.Count(v, ":") > 1 && !strings.HasPrefix(v, "[") {
			return Endpoint{}, "an IPv6 address goes in brackets: [address]:port"
		}
		return Endpoint{}, "not host:port (an IPv6 address in brackets: [address]:port)"
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return Endpoint{}, "the port is not a number from 1 to 65535"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	} else if !IsHostName(host) {
		return Endpoint{}, "the host is neither an IP address nor a host name"
	}
	return Endpoint{Host: host, Port: uint16(n)}, ""
}

// IsHostName reports whether s is a DNS name, as an Endpoint's host and
// a DNS search domain are (and the destination of ustack wg's forwards):
// dot-separated labels of letters, digits, hyphens and underscores, none
// empty (a final dot aside) or longer than 63 bytes, 253 bytes in all,
// and a last label that is not all digits (that would be an IPv4 address
// in some resolver's shorthand).
func IsHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	digits := false
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		digits = true
		for _, c := range label {
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
				digits = false
			default:
				return false
			}
		}
	}
	return !digits
}
