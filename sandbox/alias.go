package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/forward"
)

// guestAliases is the relay with Config.MapGuestAddr4 and MapGuestAddr6
// in front of it: a TCP connection to one of them goes to a relay of its
// own (forward.Relay), whose dialer dials the sandbox's own address of
// the connection's family on the host instead; the rest goes to the
// sandbox's relay.
type guestAliases struct {
	forward.Handler
	ping    forward.PingHandler
	aliases forward.Handler
	to      map[netip.Addr]netip.Addr // alias -> the sandbox's address
}

var (
	_ forward.Handler     = (*guestAliases)(nil)
	_ forward.PingHandler = (*guestAliases)(nil)
)

// withGuestAliases returns relay (a forward.Relay, which takes pings)
// with c's guest address aliases in front of it, dialed with d, or relay
// itself if c has none.
func withGuestAliases(relay forward.Handler, d proxy.ContextDialer, c *Config) forward.Handler {
	g := &guestAliases{Handler: relay, to: map[netip.Addr]netip.Addr{}}
	if c.MapGuestAddr4.IsValid() {
		g.to[c.MapGuestAddr4] = c.Addr4.Addr()
	}
	if c.MapGuestAddr6.IsValid() && !c.NoIPv6 {
		g.to[c.MapGuestAddr6] = c.Addr6.Addr()
	}
	ping, _ := relay.(forward.PingHandler)
	if len(g.to) == 0 || ping == nil {
		return relay
	}
	g.ping = ping
	// The aliases are the only destinations of their relay, and may be
	// link-local (Podman's are), which the policy would otherwise refuse
	// as reserved.
	var allow []netip.Prefix
	for a := range g.to {
		allow = append(allow, netip.PrefixFrom(a, a.BitLen()))
	}
	g.aliases = forward.Relay(&aliasDialer{d: d, to: g.to}, &forward.Policy{Allow: allow})
	return g
}

// HandleTCP implements forward.Handler.
func (g *guestAliases) HandleTCP(req *forward.TCPRequest) {
	if _, ok := g.to[req.Dst().Addr()]; ok {
		g.aliases.HandleTCP(req)
		return
	}
	g.Handler.HandleTCP(req)
}

// HandlePing implements forward.PingHandler: pings are the relay's.
func (g *guestAliases) HandlePing(req *forward.PingRequest) { g.ping.HandlePing(req) }

// aliasDialer dials, for a guest address alias, the sandbox's address
// it stands for, at the same port.
type aliasDialer struct {
	d  proxy.ContextDialer
	to map[netip.Addr]netip.Addr
}

// DialContext implements proxy.ContextDialer.
func (a *aliasDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("sandbox: guest address alias: %w", err)
	}
	to, ok := a.to[ap.Addr()]
	if !ok {
		return nil, fmt.Errorf("sandbox: %v is no guest address alias", ap.Addr())
	}
	return a.d.DialContext(ctx, network, netip.AddrPortFrom(to, ap.Port()).String())
}
