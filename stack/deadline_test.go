package stack_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// blocker is a call that blocks on one of the stack's conns or
// listeners, and how to set the deadline that ends it.
type blocker struct {
	name        string
	setup       func(t *testing.T, p *stacktest.Pair) (target any, closer func() error)
	call        func(target any) error
	setDeadline func(target any, d time.Time) error
	event       waiter.EventMask // what the blocked call waits for
}

var blockers = []blocker{
	{
		name: "tcp read",
		setup: func(t *testing.T, p *stacktest.Pair) (any, func() error) {
			c, _ := tcpPair(t, p)
			return c, c.Close
		},
		call:        func(c any) error { _, err := c.(net.Conn).Read(make([]byte, 16)); return err },
		setDeadline: func(c any, d time.Time) error { return c.(net.Conn).SetReadDeadline(d) },
		event:       waiter.EventIn,
	},
	{
		name: "tcp write",
		setup: func(t *testing.T, p *stacktest.Pair) (any, func() error) {
			c, _ := tcpPair(t, p) // the peer never reads: the buffers fill
			return c, c.Close
		},
		call:        func(c any) error { _, err := c.(net.Conn).Write(make([]byte, 64<<20)); return err },
		setDeadline: func(c any, d time.Time) error { return c.(net.Conn).SetWriteDeadline(d) },
		event:       waiter.EventOut,
	},
	{
		name: "udp read",
		setup: func(t *testing.T, p *stacktest.Pair) (any, func() error) {
			c, err := p.A.ListenUDP(netip.AddrPortFrom(stacktest.A4, 9))
			require.NoError(t, err)
			return c, c.Close
		},
		call:        func(c any) error { _, _, err := c.(net.PacketConn).ReadFrom(make([]byte, 16)); return err },
		setDeadline: func(c any, d time.Time) error { return c.(net.PacketConn).SetReadDeadline(d) },
		event:       waiter.EventIn,
	},
	{
		name: "ping read",
		setup: func(t *testing.T, p *stacktest.Pair) (any, func() error) {
			c, err := p.A.ListenPacket("ip6:ipv6-icmp", "")
			require.NoError(t, err)
			return c, c.Close
		},
		call:        func(c any) error { _, _, err := c.(net.PacketConn).ReadFrom(make([]byte, 16)); return err },
		setDeadline: func(c any, d time.Time) error { return c.(net.PacketConn).SetReadDeadline(d) },
		event:       waiter.EventIn,
	},
	{
		name: "accept",
		setup: func(t *testing.T, p *stacktest.Pair) (any, func() error) {
			ln, err := p.A.ListenTCP(netip.AddrPortFrom(stacktest.A4, 80))
			require.NoError(t, err)
			return ln, ln.Close
		},
		call: func(ln any) error {
			c, err := ln.(net.Listener).Accept()
			if err == nil {
				c.Close()
				return errors.New("accepted a conn nobody dialed")
			}
			return err
		},
		setDeadline: func(ln any, d time.Time) error {
			return ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(d)
		},
		event: waiter.EventIn,
	},
}

// tcpPair connects A to B and returns both ends; they close with the
// test.
func tcpPair(t *testing.T, p *stacktest.Pair) (client, server net.Conn) {
	t.Helper()
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(stacktest.B4, 80))
	require.NoError(t, err)
	defer ln.Close()
	accepted := acceptOne(ln)
	client, err = p.A.DialTCP(context.Background(), netip.AddrPortFrom(stacktest.B4, 80))
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestBlockedCallsWake blocks a read, a write and an accept on each kind
// of conn and listener the stack makes, waits until the call is on the
// endpoint's waiter queue, and ends it: with a deadline in the past
// (a timeout), with Close (net.ErrClosed), or with a deadline set before
// the call that passes while it waits (a timeout), with the cache on and
// off.
func TestBlockedCallsWake(t *testing.T) {
	for _, mode := range []stack.CacheMode{stack.CacheOn, stack.CacheOff} {
		for _, b := range blockers {
			for _, end := range []string{"past deadline", "close", "passing deadline"} {
				t.Run(mode.String()+"/"+b.name+"/"+end, func(t *testing.T) {
					p := stacktest.New(t, &stacktest.Options{Stack: &stack.Options{Cache: mode}})
					target, closer := b.setup(t, p)
					defer closer()
					if end == "passing deadline" {
						require.NoError(t, b.setDeadline(target, time.Now().Add(50*time.Millisecond)))
					}
					done := make(chan error, 1)
					go func() { done <- b.call(target) }()
					if end != "passing deadline" {
						require.Eventually(t, func() bool { return stack.Waiting(target, b.event) }, 10*time.Second, 100*time.Microsecond,
							"the call never waited")
						select {
						case err := <-done:
							t.Fatalf("the call returned (%v) before it was ended", err)
						default:
						}
					}
					switch end {
					case "past deadline":
						require.NoError(t, b.setDeadline(target, time.Unix(1, 0)))
					case "close":
						require.NoError(t, closer())
					}
					var err error
					select {
					case err = <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("the blocked call did not end")
					}
					var op *net.OpError
					require.ErrorAs(t, err, &op)
					if end == "close" {
						require.ErrorIs(t, err, net.ErrClosed)
						require.Error(t, b.setDeadline(target, time.Time{}), "a deadline on a closed conn")
						return
					}
					require.ErrorIs(t, err, os.ErrDeadlineExceeded)
					require.True(t, op.Timeout())
					require.False(t, stack.Waiting(target, b.event), "the call left the waiter queue")
				})
			}
		}
	}
}
