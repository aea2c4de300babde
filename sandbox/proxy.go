package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
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
func parseProxy(rawURL string, via *net.Dialer) (proxy.ContextDialer, error) {
	d, err := upstream.Parse(rawURL, via)
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

// dialer is what the relay dials flows with: c.Dialer, host sockets, or
// the proxy of c.Proxy, the sockets bound to c.Interface and marked with c.Mark
// either way, and TCP's bound to the outbound addresses.
func dialer(c *Config) (proxy.ContextDialer, error) {
	if c.Dialer != nil {
		return c.Dialer, nil
	}
	host := &net.Dialer{Timeout: c.ConnectTimeout, Control: chainControls(socketControl(c.Interface, c.Mark), outboundControl(c.OutboundAddr4, c.OutboundAddr6))}
	if c.Proxy == "" {
		return host, nil
	}
	d, err := parseProxy(c.Proxy, host)
	if err != nil {
		return nil, err
	}
	pd := &proxyDialer{d: d, timeout: c.ConnectTimeout}
	if c.ProxyUDPDirect {
		return &proxyUDPDirect{proxyDialer: pd, lc: net.ListenConfig{Control: host.Control}}, nil
	}
	return pd, nil
}

// chainControls runs each of controls (nil ones skipped) on a socket, in
// order, and stops at the first error; nil if none is left.
func chainControls(controls ...func(network, address string, c syscall.RawConn) error) func(network, address string, c syscall.RawConn) error {
	var fs []func(network, address string, c syscall.RawConn) error
	for _, f := range controls {
		if f != nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(network, address string, c syscall.RawConn) error {
		for _, f := range fs {
			if err := f(network, address, c); err != nil {
				return err
			}
		}
		return nil
	}
}
