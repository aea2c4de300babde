package sandbox

import (
	"net"
	"net/netip"

	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/forward"
)

// guestAliases is the relay with Config.MapGuestAddr4 and MapGuestAddr6
// in front of it: a TCP connection to one of them is dialed at the
// sandbox's own address of its family on the host, the rest goes to the
// relay.
type guestAliases struct {
	forward.Handler
	ping forward.PingHandler
	d    proxy.ContextDialer
	to   map[netip.Addr]netip.Addr // alias -> the sandbox's address
}

var (
	_ forward.Handler     = (*guestAliases)(nil)
	_ forward.PingHandler = (*guestAliases)(nil)
)

// withGuestAliases returns relay (a forward.Relay, which takes pings)
// with c's guest address aliases in front of it, dialed with d, or relay
// itself if c has none.
func withGuestAliases(relay forward.Handler, d proxy.ContextDialer, c *Config) forward.Handler {
	to := map[netip.Addr]netip.Addr{}
	if c.MapGuestAddr4.IsValid() {
		to[c.MapGuestAddr4] = c.Addr4.Addr()
	}
	if c.MapGuestAddr6.IsValid() && !c.NoIPv6 {
		to[c.MapGuestAddr6] = c.Addr6.Addr()
	}
	ping, _ := relay.(forward.PingHandler)
	if len(to) == 0 || ping == nil {
		return relay
	}
	return &guestAliases{Handler: relay, ping: ping, d: d, to: to}
}

// HandleTCP implements forward.Handler: dial first, then complete the
// sandbox's handshake, as the relay does.
func (g *guestAliases) HandleTCP(req *forward.TCPRequest) {
	to, ok := g.to[req.Dst().Addr()]
	if !ok {
		g.Handler.HandleTCP(req)
		return
	}
	up, err := g.d.DialContext(req.Context(), "tcp", netip.AddrPortFrom(to, req.Dst().Port()).String())
	if err != nil {
		req.Reject(true)
		return
	}
	c, err := req.Accept()
	if err != nil {
		// The sandbox gave up on the handshake meanwhile.
		if tc, ok := up.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		up.Close()
		return
	}
	// The relay belongs to the Forwarder from here on; an error means it
	// closed meanwhile and reset both.
	forward.SpliceAsync(c, up)
}

// HandlePing implements forward.PingHandler: pings are the relay's.
func (g *guestAliases) HandlePing(req *forward.PingRequest) { g.ping.HandlePing(req) }
