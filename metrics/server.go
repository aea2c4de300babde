package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector is what Serve serves: a Prometheus collector. NewStack and
// NewFunc make them.
type Collector = prometheus.Collector

// Server serves Prometheus metrics over HTTP at /metrics. Its serving
// goroutine starts in Serve and is joined by Close.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when Serve has returned
}

// shutdownGrace is how long Close waits for scrapes in progress: a scrape
// reads counters already in memory and takes milliseconds.
const shutdownGrace = 5 * time.Second

// Serve serves the given collectors, and the Go runtime's and the
// process's (goroutines, heap, resident memory, open descriptors, which a
// soak or a leak hunt watches), on addr, a host (kernel) address such as
// 127.0.0.1:9100.
func Serve(addr string, cs ...Collector) (*Server, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.srv.Serve(ln)
	}()
	return m, nil
}

// Addr returns the address metrics are served on.
func (m *Server) Addr() string { return m.ln.Addr().String() }

// Close stops the server, waiting up to 5 s for scrapes in progress, and
// joins its goroutine.
func (m *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	<-m.done
	return err
}
