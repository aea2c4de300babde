package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"

	"golang.org/x/net/proxy"
)

// Parse returns a dialer through the proxy that rawURL names:
//
//   - socks5://[user:pass@]HOST:PORT (or socks5h://, the same): SOCKS5,
//     with username/password authentication (RFC 1929) when user is
//     given. Host names to dial are sent to the proxy, which resolves
//     them.
//   - http://[user:pass@]HOST:PORT: HTTP CONNECT, with Proxy-Authorization
//     basic credentials when user is given. The proxy resolves names and
//     picks the IP version: "tcp4" and "tcp6" mean "tcp" to it.
//
// The proxy itself is dialed with via, on the host (a copy of it; nil
// means a zero net.Dialer): its Control can bind the socket to an
// interface or mark it, so that a default route through a tunnel of the
// caller's does not take the proxy's connection. The dialers are safe
// for concurrent use; their errors are *net.OpError, naming the proxy
// (without its password) and what went wrong.
func Parse(rawURL string, via *net.Dialer) (proxy.ContextDialer, error) {
	var d net.Dialer
	if via != nil {
		d = *via
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password and all: keep only
		// the reason.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("proxy URL: %w", err)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("proxy URL %s: want only scheme, credentials, host and port, as in socks5://127.0.0.1:1080", u.Redacted())
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("proxy URL %s: want HOST:PORT after the scheme, as in socks5://127.0.0.1:1080", u.Redacted())
	}
	switch u.Scheme {
	case "socks5", "socks5h":
		return newSOCKS5(u, d)
	case "http":
		return newConnect(u, d), nil
	}
	return nil, fmt.Errorf("proxy URL %s: scheme %q not supported: use socks5:// or http://", u.Redacted(), u.Scheme)
}

// credentials returns the user and password of u, if it has a user.
func credentials(u *url.URL) (user, pass string, ok bool) {
	if u.User == nil {
		return "", "", false
	}
	pass, _ = u.User.Password()
	return u.User.Username(), pass, true
}

// socksDialer is x/net's SOCKS5 client with conns that can half-close.
type socksDialer struct {
	d proxy.ContextDialer
}

// rawKey carries, in a dial's context, where the SOCKS client's forward
// dial leaves the conn to the proxy: x/net's client hides it in the conn
// it returns, and CloseWrite needs it.
type rawKey struct{}

// forward dials the SOCKS5 proxy and notes the conn for its dial.
type forward struct{ net.Dialer }

// DialContext implements proxy.ContextDialer.
func (f *forward) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := f.Dialer.DialContext(ctx, network, address)
	if slot, ok := ctx.Value(rawKey{}).(*atomic.Pointer[net.Conn]); ok && err == nil {
		slot.Store(&c)
	}
	return c, err
}

func newSOCKS5(u *url.URL, via net.Dialer) (proxy.ContextDialer, error) {
	var auth *proxy.Auth
	if user, pass, ok := credentials(u); ok {
		// RFC 1929 carries each in one length byte; x/net refuses the
		// rest with a bare "invalid username/password".
		if len(user) == 0 || len(user) > 255 || len(pass) > 255 {
			return nil, fmt.Errorf("proxy URL %s: SOCKS5 wants a user name of 1 to 255 bytes and a password of at most 255", u.Redacted())
		}
		auth = &proxy.Auth{User: user, Password: pass}
	}
	d, err := proxy.SOCKS5("tcp", u.Host, auth, &forward{Dialer: via})
	if err != nil {
		return nil, fmt.Errorf("proxy URL %s: %w", u.Redacted(), err)
	}
	cd, ok := d.(proxy.ContextDialer)
	if !ok {
		return nil, fmt.Errorf("proxy URL %s: x/net's SOCKS5 dialer (%T) has no DialContext", u.Redacted(), d)
	}
	return &socksDialer{d: cd}, nil
}

// DialContext implements proxy.ContextDialer.
func (s *socksDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var raw atomic.Pointer[net.Conn]
	c, err := s.d.DialContext(context.WithValue(ctx, rawKey{}, &raw), network, address)
	if err != nil {
		return nil, err
	}
	var under net.Conn
	if p := raw.Load(); p != nil {
		under = *p
	}
	return tunnel(c, under, nil), nil
}

// Dial implements proxy.Dialer.
func (s *socksDialer) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

var (
	_ proxy.ContextDialer = (*socksDialer)(nil)
	_ proxy.Dialer        = (*socksDialer)(nil)
)

type closeWriter interface{ CloseWrite() error }

// tunnel returns c, a conn through a proxy, as the caller gets it: its
// reads first return pending (bytes that came with the proxy's reply),
// and it has CloseWrite if raw, the conn to the proxy under it, has.
func tunnel(c, raw net.Conn, pending []byte) net.Conn {
	cw, half := raw.(closeWriter)
	if !half && len(pending) == 0 {
		return c
	}
	t := &tunnelConn{Conn: c}
	if len(pending) > 0 {
		t.pending = pending
		t.hasPending.Store(true)
	}
	if half {
		return &halfCloseConn{tunnelConn: t, cw: cw}
	}
	return t
}

// tunnelConn is a conn through a proxy whose reads first return what
// the proxy's reply carried past its end.
type tunnelConn struct {
	net.Conn
	hasPending atomic.Bool // pending is not yet all read
	mu         sync.Mutex  // guards pending
	pending    []byte
}

// Read implements net.Conn.
func (c *tunnelConn) Read(b []byte) (int, error) {
	if c.hasPending.Load() {
		c.mu.Lock()
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
			c.hasPending.Store(false)
		}
		c.mu.Unlock()
		if n > 0 {
			return n, nil
		}
	}
	return c.Conn.Read(b)
}

// halfCloseConn is a tunnelConn whose conn to the proxy can half-close.
type halfCloseConn struct {
	*tunnelConn
	cw closeWriter
}

// CloseWrite shuts down the writing side of the conn to the proxy, which
// passes the end of the stream on to the destination.
func (c *halfCloseConn) CloseWrite() error { return c.cw.CloseWrite() }

// errNotTCP is a dial of anything but TCP through a proxy.
var errNotTCP = errors.New("a proxy dialer carries TCP only (tcp, tcp4, tcp6)")
