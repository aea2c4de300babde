package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"golang.org/x/net/proxy"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/forward/upstream"
)

// ProxyForms names the proxy URLs Config.Proxy takes, for messages.
const ProxyForms = "socks5://[user:pass@]HOST:PORT or http://[user:pass@]HOST:PORT (HTTP CONNECT)"

// parseProxy returns a dialer through the proxy rawURL names, or an error
// that names the forms accepted and never the password: url.Parse's
// errors quote the whole URL, so only their reason is kept.
func parseProxy(rawURL string) (proxy.ContextDialer, error) {
	d, err := upstream.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("proxy URL: %w", ue.Err)
		}
		return nil, fmt.Errorf("sandbox: %w; want %s", err, ProxyForms)
	}
	return d, nil
}

// proxyDialer dials through a proxy within the connect timeout, which a
// net.Dialer would apply itself.
type proxyDialer struct {
	d       proxy.ContextDialer
	timeout time.Duration
}

// DialContext implements proxy.ContextDialer.
func (p *proxyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.d.DialContext(ctx, network, address)
}

// proxyUDPDirect dials TCP through a proxy and carries UDP on host
// sockets (forward.PacketListener), for Config.ProxyUDPDirect.
type proxyUDPDirect struct {
	*proxyDialer
	lc net.ListenConfig
}

// ListenPacket implements forward.PacketListener with a host socket.
func (p *proxyUDPDirect) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	return p.lc.ListenPacket(ctx, network, address)
}

var (
	_ proxy.ContextDialer    = (*proxyDialer)(nil)
	_ forward.PacketListener = (*proxyUDPDirect)(nil)
)

// dialer is what the relay dials flows with: host sockets, or the proxy
// of c.Proxy.
func dialer(c *Config) (proxy.ContextDialer, error) {
	if c.Proxy == "" {
		return &net.Dialer{Timeout: c.ConnectTimeout, Control: outboundControl(c.OutboundAddr4, c.OutboundAddr6)}, nil
	}
	d, err := parseProxy(c.Proxy)
	if err != nil {
		return nil, err
	}
	pd := &proxyDialer{d: d, timeout: c.ConnectTimeout}
	if c.ProxyUDPDirect {
		return &proxyUDPDirect{proxyDialer: pd}, nil
	}
	return pd, nil
}
