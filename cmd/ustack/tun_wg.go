package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// sandboxWG is ustack tun -wg: the WireGuard tunnel a sandbox's flows
// leave through, instead of host sockets.
type sandboxWG struct {
	// Config is the configuration file, Marshal'ed back with the peers'
	// endpoint names resolved: it holds the private key.
	Config []byte
	// Note says at start where the flows go.
	Note string
}

// parseTunWG reads -wg's file for the sandbox d, and checks what the
// other flags say against it (their names in messages: set reports
// whether the command line gave one). The sandbox's DNS queries go to
// the file's first DNS server, through the tunnel, unless -dns-upstream
// names another; with neither they are refused. The returned warning,
// if not empty, is the file's mode.
func parseTunWG(path string, d *sandbox.Config, set func(string) bool) (wg *sandboxWG, warning string, err error) {
	for _, f := range []struct{ flag, why string }{
		{"proxy", "flows go through the tunnel or a proxy; give one"},
		{"interface", "the relay opens no host sockets of its own with -wg, and wireguard-go's cannot be bound to an interface: route the peer's endpoint instead"},
		{"allow-host-loopback", "the host's loopback is not reachable through the tunnel"},
	} {
		if set(f.flag) {
			return nil, "", fmt.Errorf("-%s with -wg: %s", f.flag, f.why)
		}
	}
	conf, warning, err := readWGConfig(path)
	if err != nil {
		return nil, "", fmt.Errorf("-wg %w", err)
	}
	if d.Mark != 0 {
		// The only host sockets are wireguard-go's: the mark is theirs.
		if m := conf.Interface.FwMark; m != 0 && m != d.Mark {
			return nil, "", fmt.Errorf("-fwmark %d and %s's FwMark %d: give one", d.Mark, path, m)
		}
		conf.Interface.FwMark, d.Mark = d.Mark, 0
	}
	if !d.NoDNS && !d.DNSUpstream.IsValid() {
		if len(conf.Interface.DNS) == 0 {
			return nil, "", fmt.Errorf("-wg %s: no [Interface] DNS, and no -dns-upstream: name the resolver the sandbox's DNS queries go to through the tunnel, or -dns-upstream off", path)
		}
		d.DNSUpstream = netip.AddrPortFrom(conf.Interface.DNS[0], 53)
	}
	if err := resolveWGEndpoints(conf); err != nil {
		return nil, "", fmt.Errorf("-wg %s: %w", path, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "flows leave through the WireGuard tunnel of %s (tunnel address %s, MTU %d", path, joinStrings(conf.Interface.Addresses), wgMTU(conf))
	for _, p := range conf.Peers {
		if !p.Endpoint.IsZero() {
			fmt.Fprintf(&b, ", peer at %s", p.Endpoint)
		}
	}
	if d.NoDNS {
		b.WriteString("), DNS refused")
	} else {
		fmt.Fprintf(&b, "), DNS through it to %v", d.DNSUpstream)
	}
	note := b.String()
	return &sandboxWG{Config: conf.Marshal(), Note: note}, warning, nil
}

// open starts wireguard-go on the tunnel for the sandbox cfg, whose
// flows it carries from now on (Config.Dialer). The caller closes the
// device once the sandbox is closed.
func (w *sandboxWG) open(cfg *sandbox.Config, name string, stderr io.Writer) (*device.Device, error) {
	conf, err := wgconf.Parse(w.Config)
	if err != nil {
		return nil, fmt.Errorf("-wg: %w", err)
	}
	dev, tnet, err := openWGDevice(conf, false, wgLogger(stderr, name, false))
	if err != nil {
		return nil, fmt.Errorf("-wg: %w", err)
	}
	cfg.Dialer = tnet.Dialer()
	return dev, nil
}
