package upstream_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/forward/upstream"
	"github.com/ustack-dev/ustack/internal/microsocks"
)

// owner closes what it owns when the test ends, and waits for the
// goroutines it started.
type owner struct {
	wg sync.WaitGroup
	mu sync.Mutex
	cs []io.Closer
}

func newOwner(t *testing.T) *owner {
	o := &owner{}
	t.Cleanup(func() {
		o.mu.Lock()
		cs := o.cs
		o.cs = nil
		o.mu.Unlock()
		for _, c := range cs {
			c.Close()
		}
		o.wg.Wait()
	})
	return o
}

func (o *owner) own(c io.Closer) {
	o.mu.Lock()
	o.cs = append(o.cs, c)
	o.mu.Unlock()
}

func (o *owner) goroutine(f func()) {
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		f()
	}()
}

// serve accepts on a loopback listener and runs handle per conn.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	o := newOwner(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	o.own(ln)
	o.goroutine(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.own(c)
			o.goroutine(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

// echoServer echoes until EOF, then half-closes: a client sees the end
// of its echo only if its own half-close reached the server.
func echoServer(t *testing.T) string {
	return serve(t, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
}

// proxyOptions configure connectProxy.
type proxyOptions struct {
	user, pass string // credentials it requires; none if empty
	greeting   string // sent in the same write as the 200 reply
	silent     bool   // never answers CONNECT
	// onRequest, if not nil, runs once a request has been read: the
	// client is then waiting for the answer.
	onRequest func()
}

// connectProxy is an HTTP CONNECT proxy on loopback that relays both
// ways and passes half-closes on. It returns its address and a func
// reporting the last Proxy-Authorization it received.
func connectProxy(t *testing.T, opts proxyOptions) (string, func() string) {
	var mu sync.Mutex
	var lastAuth string
	addr := serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		mu.Lock()
		lastAuth = req.Header.Get("Proxy-Authorization")
		mu.Unlock()
		if opts.onRequest != nil {
			opts.onRequest()
		}
		if opts.silent {
			io.Copy(io.Discard, br) // until the client gives up
			return
		}
		reply := func(status string) { io.WriteString(c, "HTTP/1.1 "+status+"\r\nContent-Length: 0\r\n\r\n") }
		if req.Method != http.MethodConnect {
			reply("405 Method Not Allowed")
			return
		}
		if opts.user != "" {
			want := "Basic " + base64.StdEncoding.EncodeToString([]byte(opts.user+":"+opts.pass))
			if req.Header.Get("Proxy-Authorization") != want {
				io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
				return
			}
		}
		up, err := net.Dial("tcp", req.Host)
		if err != nil {
			reply("502 Bad Gateway")
			return
		}
		defer up.Close()
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"+opts.greeting)
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(up, br)
			up.(*net.TCPConn).CloseWrite()
		}()
		io.Copy(c, up)
		c.(*net.TCPConn).CloseWrite()
		<-done
	})
	return addr, func() string {
		mu.Lock()
		defer mu.Unlock()
		return lastAuth
	}
}

// roundTrip sends msg through c, half-closes, and checks that exactly
// msg comes back followed by the end of the stream.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := io.WriteString(c, msg)
	require.NoError(t, err)
	buf := make([]byte, len(msg))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, msg, string(buf))
	cw, ok := c.(interface{ CloseWrite() error })
	require.True(t, ok, "a conn through the proxy can half-close (%T)", c)
	require.NoError(t, cw.CloseWrite())
	rest, err := io.ReadAll(c)
	require.NoError(t, err, "the half-close reached the far end, which ended its side")
	require.Empty(t, rest)
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"ftp://127.0.0.1:21", `scheme "ftp" not supported`},
		{"https://127.0.0.1:443", `scheme "https" not supported`},
		{"socks5://127.0.0.1", "want HOST:PORT"},
		{"http://:8080", "want HOST:PORT"},
		{"http://127.0.0.1:8080/path", "want only scheme"},
		{"http://127.0.0.1:8080?x=1", "want only scheme"},
		{"socks5://:secret@127.0.0.1:1080", "user name of 1 to 255 bytes"},
		{"socks5://u:" + strings.Repeat("p", 256) + "@127.0.0.1:1080", "password of at most 255"},
		{"http://%zz", "proxy URL"},
		{"http://u:secret@h:x", "invalid port"},
	} {
		_, err := upstream.Parse(tc.url, nil)
		require.ErrorContains(t, err, tc.want, tc.url)
		require.NotContains(t, err.Error(), "secret", "errors never show the password")
	}
}

func TestHTTPConnect(t *testing.T) {
	echo := echoServer(t)
	proxyAddr, lastAuth := connectProxy(t, proxyOptions{})
	d, err := upstream.Parse("http://"+proxyAddr, nil)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "through an HTTP CONNECT proxy")
	require.Empty(t, lastAuth(), "no credentials, no Proxy-Authorization")
}

func TestHTTPConnectAuth(t *testing.T) {
	echo := echoServer(t)
	proxyAddr, lastAuth := connectProxy(t, proxyOptions{user: "alice", pass: "s3cret:x"})
	d, err := upstream.Parse("http://alice:s3cret%3Ax@"+proxyAddr, nil)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "authenticated")
	require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:s3cret:x")), lastAuth())

	for _, tc := range []struct{ url, hint string }{
		{"http://" + proxyAddr, "give user:pass"},
		{"http://alice:wrong@" + proxyAddr, "check the user and password"},
	} {
		d, err := upstream.Parse(tc.url, nil)
		require.NoError(t, err)
		_, err = d.DialContext(t.Context(), "tcp", echo)
		var se *upstream.StatusError
		require.ErrorAs(t, err, &se)
		require.Equal(t, http.StatusProxyAuthRequired, se.Code)
		require.ErrorContains(t, err, "407 Proxy Authentication Required")
		require.ErrorContains(t, err, tc.hint)
		require.NotContains(t, err.Error(), "wrong", "errors never show the password")
	}
}

func TestHTTPConnectRefusedByProxy(t *testing.T) {
	// A port nobody listens on: the proxy cannot connect and says 502.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	proxyAddr, _ := connectProxy(t, proxyOptions{})
	d, err := upstream.Parse("http://"+proxyAddr, nil)
	require.NoError(t, err)
	_, err = d.DialContext(t.Context(), "tcp4", closed)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "tcp4", op.Net)
	require.Equal(t, closed, op.Addr.String())
	var se *upstream.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadGateway, se.Code)
	require.ErrorContains(t, err, "502 Bad Gateway")
	require.ErrorContains(t, err, closed)

	_, err = d.DialContext(t.Context(), "udp", closed)
	require.ErrorContains(t, err, "TCP only")
}

func TestHTTPConnectProxyDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := ln.Addr().String()
	ln.Close()
	d, err := upstream.Parse("http://u:hidden@"+gone, nil)
	require.NoError(t, err)
	_, err = d.DialContext(t.Context(), "tcp", "198.18.0.1:80")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorContains(t, err, gone)
	require.NotContains(t, err.Error(), "hidden")
}

// TestHTTPConnectKeepsEarlyBytes has the proxy send the destination's
// first bytes in the same segment as its 200 reply: they are the
// tunnel's, and the first read returns them.
func TestHTTPConnectKeepsEarlyBytes(t *testing.T) {
	echo := echoServer(t)
	proxyAddr, _ := connectProxy(t, proxyOptions{greeting: "220 ready\r\n"})
	d, err := upstream.Parse("http://"+proxyAddr, nil)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, len("220 ready\r\n"))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "220 ready\r\n", string(buf))
	roundTrip(t, c, "after the greeting")
}

// TestHTTPConnectContext has a proxy that never answers: the dial ends
// at ctx's deadline, or when ctx is cancelled.
func TestHTTPConnectContext(t *testing.T) {
	proxyAddr, _ := connectProxy(t, proxyOptions{silent: true})
	d, err := upstream.Parse("http://"+proxyAddr, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", "198.18.0.1:80")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a dial past its deadline times out: %v", err)

	// Cancelled while the dial waits for the proxy's answer: the proxy
	// cancels it once it has read the request.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	proxyAddr, _ = connectProxy(t, proxyOptions{silent: true, onRequest: cancel})
	d, err = upstream.Parse("http://"+proxyAddr, nil)
	require.NoError(t, err)
	_, err = d.DialContext(ctx, "tcp", "198.18.0.1:80")
	require.ErrorIs(t, err, context.Canceled)
}

// TestParseVia: the proxy itself is dialed with the dialer given, whose
// Control sees the connection to the proxy (where a caller binds or
// marks it), for both kinds of proxy.
func TestParseVia(t *testing.T) {
	echo := echoServer(t)
	connectAddr, _ := connectProxy(t, proxyOptions{})
	socksAddr := microsocks.Start(t, nil).String()
	for _, url := range []string{"http://" + connectAddr, "socks5://" + socksAddr} {
		var seen []string
		var mu sync.Mutex
		via := &net.Dialer{Control: func(network, address string, _ syscall.RawConn) error {
			mu.Lock()
			seen = append(seen, address)
			mu.Unlock()
			return nil
		}}
		d, err := upstream.Parse(url, via)
		require.NoError(t, err)
		c, err := d.DialContext(t.Context(), "tcp", echo)
		require.NoError(t, err, url)
		roundTrip(t, c, "through "+url)
		c.Close()
		mu.Lock()
		require.Equal(t, []string{strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "socks5://")}, seen, "%s: the proxy dialed through via", url)
		mu.Unlock()
	}
}
