package upstream

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/proxy"
)

// connectDialer dials through an HTTP proxy with CONNECT (RFC 9110,
// section 9.3.6).
type connectDialer struct {
	proxyAddr string // host:port
	name      string // the proxy's URL without its password, for errors
	auth      string // Proxy-Authorization value; "" for none
	forward   net.Dialer
}

var (
	_ proxy.ContextDialer = (*connectDialer)(nil)
	_ proxy.Dialer        = (*connectDialer)(nil)
)

func newConnect(u *url.URL, via net.Dialer) *connectDialer {
	d := &connectDialer{proxyAddr: u.Host, name: u.Redacted(), forward: via}
	if user, pass, ok := credentials(u); ok {
		d.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	return d
}

// target is the address a dial asked for, as a net.Addr for OpErrors:
// the proxy resolves it, so it need not be an IP address.
type target struct{ network, address string }

func (t target) Network() string { return t.network }
func (t target) String() string  { return t.address }

// aLongTimeAgo is a deadline in the past: setting it makes every
// blocked read and write on a conn return at once.
var aLongTimeAgo = time.Unix(1, 0)

// DialContext implements proxy.ContextDialer: it connects to the proxy
// and asks it to CONNECT to address. ctx bounds the whole handshake.
func (d *connectDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	fail := func(err error) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: target{network, address}, Err: err}
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fail(errNotTCP)
	}
	if _, _, err := net.SplitHostPort(address); err != nil {
		return fail(err)
	}
	c, err := d.forward.DialContext(ctx, "tcp", d.proxyAddr)
	if err != nil {
		return fail(fmt.Errorf("proxy %s: %w", d.name, err))
	}
	// The handshake's reads and writes block on the conn, not on ctx:
	// end them when ctx ends (at its deadline, or cancelled), so that
	// the error is always ctx's.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	pending, err := d.handshake(c, address)
	if !stop() {
		// ctx ended during the handshake: that is the error, whatever
		// the handshake saw.
		c.Close()
		return fail(ctx.Err())
	}
	if err != nil {
		c.Close()
		return fail(err)
	}
	return tunnel(c, c, pending), nil
}

// Dial implements proxy.Dialer.
func (d *connectDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// handshake sends CONNECT for address on c and reads the proxy's reply.
// It returns the bytes that arrived after the reply, which belong to the
// tunnel.
func (d *connectDialer) handshake(c net.Conn, address string) ([]byte, error) {
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: address},
		Host:   address,
		Header: http.Header{"User-Agent": {"ustack"}},
	}
	if d.auth != "" {
		req.Header.Set("Proxy-Authorization", d.auth)
	}
	if err := req.Write(c); err != nil {
		return nil, fmt.Errorf("proxy %s: send CONNECT: %w", d.name, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: read the reply to CONNECT: %w", d.name, err)
	}
	// A reply to CONNECT has no body (RFC 9110): what follows is the
	// tunnel's, or nothing the caller wants after a refusal.
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := &StatusError{Proxy: d.name, Target: address, Code: resp.StatusCode, Status: resp.Status}
		if resp.StatusCode == http.StatusProxyAuthRequired {
			e.hint = "give user:pass in the proxy URL"
			if d.auth != "" {
				e.hint = "check the user and password in the proxy URL"
			}
		}
		return nil, e
	}
	if br.Buffered() == 0 {
		return nil, nil
	}
	pending := make([]byte, br.Buffered())
	_, err = br.Read(pending)
	return pending, err
}

// StatusError is an HTTP proxy's refusal of CONNECT, for callers that
// tell a refused destination from an unreachable one: Code 407 is
// missing or wrong credentials, 403 a destination the proxy's policy
// forbids, 502 or 504 one it could not reach.
type StatusError struct {
	Proxy  string // the proxy's URL, without its password
	Target string // the address CONNECT asked for
	Code   int    // the reply's status code
	Status string // the reply's status line, as "407 Proxy Authentication Required"
	hint   string // what to do about it, if we know
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("proxy %s refused CONNECT to %s: %s", e.Proxy, e.Target, e.Status)
	if e.hint != "" {
		msg += ": " + e.hint
	}
	return msg
}
