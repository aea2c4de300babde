package serve

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack-dev/ustack/cache"
	"github.com/ustack-dev/ustack/stack"
)

const (
	// copyBufSize is each TCP conn's copy buffer: io.Copy's own size.
	copyBufSize = 32 << 10
	// connBufCache is how many copy buffers each listener's cache keeps
	// for the next conns once earlier ones closed: 64 (2 MiB) covers a
	// burst of short conns; beyond that a buffer goes to the garbage
	// collector, and an idle listener's go after cache.DefaultIdleAfter.
	connBufCache = 64
)

// MaxBytes bounds /bytes/N: 1 TiB, far beyond any test, so that a typo
// cannot ask for an unbounded stream.
const MaxBytes = 1 << 40

// Ports says which services to run; 0 turns one off.
type Ports struct {
	Echo, Discard, HTTP uint16
}

// Net is where the services listen: a ustack *stack.Stack, or the host
// kernel's sockets (Kernel). A Net that also has a Caching() bool method
// (as *stack.Stack does) is asked whether to cache copy buffers, and one
// with a Stats() stack.Stats method has its counters on the status page.
type Net interface {
	// ListenTCP listens on addr; its unspecified address means every
	// address of that IP version ([::]: of both).
	ListenTCP(addr netip.AddrPort) (net.Listener, error)
	// ListenUDP is ListenTCP for a UDP socket.
	ListenUDP(addr netip.AddrPort) (net.PacketConn, error)
}

var (
	_ Net = (*stack.Stack)(nil)
	_ Net = Kernel{}
)

// Kernel is the Net of the host kernel's sockets, in the calling
// goroutine's network namespace: the same services on the Linux stack, to
// measure ustack against. An AddrPort without an address (the zero Addr)
// listens as Go's net does for ":port": on [::] dual-stack where the
// kernel has IPv6, else on 0.0.0.0.
type Kernel struct{}

// ListenTCP implements Net.
func (Kernel) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	return net.ListenTCP("tcp", kernelAddr(addr, net.TCPAddrFromAddrPort, func(p int) *net.TCPAddr { return &net.TCPAddr{Port: p} }))
}

// ListenUDP implements Net.
func (Kernel) ListenUDP(addr netip.AddrPort) (net.PacketConn, error) {
	return net.ListenUDP("udp", kernelAddr(addr, net.UDPAddrFromAddrPort, func(p int) *net.UDPAddr { return &net.UDPAddr{Port: p} }))
}

// kernelAddr converts addr with conv, or to its port alone (portOnly) if
// addr has no address.
func kernelAddr[A any](addr netip.AddrPort, conv func(netip.AddrPort) A, portOnly func(int) A) A {
	if !addr.Addr().IsValid() {
		return portOnly(int(addr.Port()))
	}
	return conv(addr)
}

// Services are the servers running on one host. Safe for concurrent use;
// Close stops them all and waits for their goroutines.
type Services struct {
	net   Net
	start time.Time

	mu     sync.Mutex // guards closers and closed
	closed bool
	closer []io.Closer
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup

	// Counters for the status page and metrics.
	Accepted, Active, EchoedBytes, DiscardedBytes, UDPEchoed, UDPDiscarded, HTTPRequests, HTTPBytes atomic.Uint64
	// Status, if set, adds lines to the status page.
	status func(w io.Writer)

	cacheMu sync.Mutex // guards caches
	caches  []*cache.Cache[[]byte]
}

// Start starts the services on n, on each address given: the unspecified
// address of every family the host has an address of, or (Kernel) the
// zero Addr for all of the kernel's, or specific addresses. status, if
// not nil, adds lines to the status page.
func Start(n Net, addrs []netip.Addr, ports Ports, status func(io.Writer)) (*Services, error) {
	s := &Services{net: n, start: time.Now(), conns: map[net.Conn]struct{}{}, status: status}
	for _, any := range addrs {
		for _, svc := range []struct {
			port uint16
			tcp  func(net.Conn, []byte)
			udp  func(net.PacketConn)
		}{
			{ports.Echo, s.echoTCP, s.echoUDP},
			{ports.Discard, s.discardTCP, s.discardUDP},
		} {
			if svc.port == 0 {
				continue
			}
			ap := netip.AddrPortFrom(any, svc.port)
			ln, err := n.ListenTCP(ap)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("serve: %w", err)
			}
			s.track(ln)
			s.wg.Add(1)
			go s.acceptLoop(ln, svc.tcp)
			pc, err := n.ListenUDP(ap)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("serve: %w", err)
			}
			s.track(pc)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				svc.udp(pc)
			}()
		}
		if ports.HTTP != 0 {
			ln, err := n.ListenTCP(netip.AddrPortFrom(any, ports.HTTP))
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("serve: %w", err)
			}
			srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
			s.track(closerFunc(func() error { return srv.Close() }))
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				srv.Serve(ln)
			}()
		}
	}
	return s, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (s *Services) track(c io.Closer) {
	s.mu.Lock()
	s.closer = append(s.closer, c)
	s.mu.Unlock()
}

// acceptLoop serves each accepted connection on its own goroutine until
// the listener is closed. With the stack's caching on, the loop owns a
// cache of copy buffers: it hands one to each conn, the conn's goroutine
// frees it when the conn ends, and the loop takes the freed ones back
// before the next Accept (parking them while it waits, so that an idle
// listener releases them). With caching off (or a Net that does not say)
// each conn allocates its own, as io.Copy does.
func (s *Services) acceptLoop(ln net.Listener, serve func(net.Conn, []byte)) {
	defer s.wg.Done()
	var bufs *cache.Cache[[]byte]
	if c, ok := s.net.(interface{ Caching() bool }); ok && c.Caching() {
		bufs = cache.New(cache.Config[[]byte]{
			Name:     "serve copy buffers",
			New:      func() []byte { return make([]byte, copyBufSize) },
			Reset:    func(b *[]byte) { *b = (*b)[:cap(*b)] },
			Size:     func(b *[]byte) int { return cap(*b) },
			MaxItems: connBufCache,
			MaxBytes: connBufCache * copyBufSize,
		})
		s.cacheMu.Lock()
		s.caches = append(s.caches, bufs)
		s.cacheMu.Unlock()
		defer bufs.Close() // buffers of conns still running are dropped when freed
	}
	for {
		if bufs != nil {
			bufs.Park()
		}
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.Accepted.Add(1)
		s.Active.Add(1)
		var it *cache.Item[[]byte]
		var buf []byte
		if bufs != nil {
			it = bufs.Get()
			buf = it.V
		}
		go func() {
			defer s.wg.Done()
			defer func() {
				c.Close()
				if it != nil {
					it.Free()
				}
				s.Active.Add(^uint64(0))
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
			serve(c, buf)
		}()
	}
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(uint64(n))
	return n, err
}

// CacheStats returns what the listeners' copy-buffer caches counted (all
// zero with the stack's caching off).
func (s *Services) CacheStats() cache.Stats {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	var st cache.Stats
	for _, c := range s.caches {
		st.Add(c.Stats())
	}
	return st
}

// echoTCP echoes c through buf (nil: a buffer of its own).
func (s *Services) echoTCP(c net.Conn, buf []byte) {
	io.CopyBuffer(countingWriter{c, &s.EchoedBytes}, c, buf)
	// Half-close so the client reads everything before EOF.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// discardTCP reads c through buf (nil: a buffer of its own) and drops it.
func (s *Services) discardTCP(c net.Conn, buf []byte) {
	io.CopyBuffer(countingWriter{io.Discard, &s.DiscardedBytes}, c, buf)
}

func (s *Services) echoUDP(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if _, err := pc.WriteTo(buf[:n], from); err == nil {
			s.UDPEchoed.Add(1)
		} else if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

func (s *Services) discardUDP(pc net.PacketConn) {
	buf := make([]byte, 65536)
	for {
		if _, _, err := pc.ReadFrom(buf); err != nil {
			return
		}
		s.UDPDiscarded.Add(1)
	}
}

// Handler is the HTTP service: /bytes/N and the status page.
func (s *Services) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		s.HTTPRequests.Add(1)
		n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
		if err != nil || n < 0 || n > MaxBytes {
			http.Error(w, fmt.Sprintf("bytes: want a count from 0 to %d", int64(MaxBytes)), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.Copy(countingWriter{w, &s.HTTPBytes}, Pattern(n))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		s.HTTPRequests.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		s.writeStatus(w)
	})
	return mux
}

func (s *Services) writeStatus(w io.Writer) {
	fmt.Fprintf(w, "ustack serve: up %v\n\n", time.Since(s.start).Round(time.Second))
	fmt.Fprintf(w, "connections: %d accepted, %d active\n", s.Accepted.Load(), s.Active.Load())
	fmt.Fprintf(w, "tcp echo %d bytes, discard %d bytes; udp echo %d, discard %d datagrams; http %d requests, %d bytes\n\n",
		s.EchoedBytes.Load(), s.DiscardedBytes.Load(), s.UDPEchoed.Load(), s.UDPDiscarded.Load(), s.HTTPRequests.Load(), s.HTTPBytes.Load())
	sn, ok := s.net.(interface{ Stats() stack.Stats })
	if !ok {
		fmt.Fprintf(w, "network: the host kernel's sockets (%T)\n", s.net)
		if s.status != nil {
			s.status(w)
		}
		return
	}
	st := sn.Stats()
	for _, n := range st.NICs {
		fmt.Fprintf(w, "nic %s (qdisc %s): tx %d packets, rx %d packets\n", n.Name, n.Qdisc, n.GVisor["Tx.Packets"], n.GVisor["Rx.Packets"])
		if n.HasLink {
			fmt.Fprintf(w, "  link: %+v\n", n.Link)
		}
		if n.HasQdiscStats {
			q := n.QdiscStats
			fmt.Fprintf(w, "  qdisc: offered %d sent %d requeued %d refused %d dropped %d backlog %d\n", q.Offered, q.Sent, q.Requeued, q.Refused.Total(), q.Dropped.Total(), q.Backlog)
		}
	}
	fmt.Fprintf(w, "\ntcp: %d established, %d segments in, %d out, %d retransmits, %d resets sent\n",
		st.Counter("TCP.CurrentEstablished"), st.Counter("TCP.ValidSegmentsReceived"), st.Counter("TCP.SegmentsSent"), st.Counter("TCP.Retransmits"), st.Counter("TCP.ResetsSent"))
	fmt.Fprintf(w, "udp: %d in, %d out, %d receive-buffer drops\n", st.Counter("UDP.PacketsReceived"), st.Counter("UDP.PacketsSent"), st.Counter("UDP.ReceiveBufferErrors"))
	if s.status != nil {
		s.status(w)
	}
}

// Close stops every service, closes every connection and waits for every
// goroutine. Idempotent.
func (s *Services) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	closers := s.closer
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return nil
}
