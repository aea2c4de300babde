package main

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack-dev/ustack/forward"
)

// httpProxyHeaderTimeout bounds how long a client takes to send a
// request's header: a limit for a stalled client, as net/http servers
// set one.
const httpProxyHeaderTimeout = 30 * time.Second

// httpProxy is an HTTP proxy whose connections go into the tunnel:
// CONNECT tunnels (what browsers and curl use for https://, and
// curl --proxytunnel for anything), and plain http:// requests in
// absolute form, forwarded through a transport that dials through the
// tunnel. With auth it asks for Basic Proxy-Authorization. Close stops
// it and ends every connection.
type httpProxy struct {
	srv            *http.Server
	ln             net.Listener
	d              *tunnelDialer
	auth           string // "USER:PASSWORD"; "" for none
	connectTimeout time.Duration
	tr             *http.Transport
	rp             *httputil.ReverseProxy

	// conns counts CONNECT tunnels made and requests forwarded, failed
	// those the tunnel refused.
	conns, failed atomic.Uint64

	mu       sync.Mutex
	closed   bool
	hijacked map[net.Conn]struct{} // CONNECT tunnels' client connections
	// wg counts Serve, each connection's goroutine until its connection
	// closes or is hijacked, and each tunnel's relay after that.
	wg sync.WaitGroup
}

// connState counts the server's connections, so that Close can wait for
// their goroutines: a connection is new in Serve's goroutine (itself
// counted, so the count is above zero then), and closed or hijacked in
// its own.
func (p *httpProxy) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		p.wg.Add(1)
	case http.StateClosed, http.StateHijacked:
		p.wg.Done()
	}
}

// newHTTPProxy serves the proxy on ln, which it takes over, until Close.
func newHTTPProxy(ln net.Listener, d *tunnelDialer, auth string, connectTimeout time.Duration) *httpProxy {
	p := &httpProxy{ln: ln, d: d, auth: auth, connectTimeout: connectTimeout, hijacked: map[net.Conn]struct{}{}}
	p.tr = &http.Transport{
		DialContext:           p.dial,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second, // net/http's DefaultTransport's
		ResponseHeaderTimeout: 0,
	}
	// A reverse proxy that leaves the request's absolute URL as it is is
	// a forward proxy: it drops the hop-by-hop headers both ways
	// (Proxy-Authorization among them) and streams the bodies.
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(*httputil.ProxyRequest) {},
		Transport: p.tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.failed.Add(1)
			http.Error(w, "ustack wg: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: httpProxyHeaderTimeout, ConnState: p.connState}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(ln)
	}()
	return p
}

// dial connects through the tunnel within the connect timeout.
func (p *httpProxy) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.connectTimeout)
	defer cancel()
	return p.d.DialContext(ctx, network, address)
}

// authorized reports whether r carries the proxy's credentials, or the
// proxy asks for none.
func (p *httpProxy) authorized(r *http.Request) bool {
	if p.auth == "" {
		return true
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	return err == nil && subtle.ConstantTimeCompare(got, []byte(p.auth)) == 1
}

// ServeHTTP implements http.Handler: CONNECT tunnels, absolute http://
// requests forwarded, anything else refused.
func (p *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="ustack wg"`)
		http.Error(w, "ustack wg: proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		p.conns.Add(1)
		p.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "ustack wg: an HTTP proxy: send CONNECT host:port, or a request for an absolute http:// URL", http.StatusBadRequest)
	}
}

// connect dials r's host:port through the tunnel and relays the client's
// connection to it.
func (p *httpProxy) connect(w http.ResponseWriter, r *http.Request) {
	tc, err := p.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		p.failed.Add(1)
		code := http.StatusBadGateway
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			code = http.StatusGatewayTimeout
		}
		http.Error(w, "ustack wg: "+err.Error(), code)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		tc.Close()
		http.Error(w, "ustack wg: this connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		tc.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		tc.Close()
		return
	}
	p.hijacked[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.hijacked, c)
		p.mu.Unlock()
		p.wg.Done()
	}()
	p.conns.Add(1)
	c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		tc.Close()
		return
	}
	// What the client sent after its request, before the answer.
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Reader.Peek(n)
		if _, err := tc.Write(b); err != nil {
			c.Close()
			tc.Close()
			return
		}
	}
	forward.Splice(tc, c)
}

// Close stops the proxy, ends every connection, forwarded request and
// tunnel, and waits for its goroutines. Idempotent.
func (p *httpProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	hijacked := p.hijacked
	p.hijacked = nil
	p.mu.Unlock()
	err := p.srv.Close()
	for c := range hijacked {
		c.Close()
	}
	p.tr.CloseIdleConnections()
	p.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
