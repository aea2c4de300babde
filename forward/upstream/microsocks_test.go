package upstream_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/forward/upstream"
	"github.com/ustack-dev/ustack/internal/microsocks"
)

func TestSOCKS5Microsocks(t *testing.T) {
	echo := echoServer(t)
	addr := microsocks.Start(t, nil).String()
	d, err := upstream.Parse("socks5://"+addr, nil)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "through microsocks")
}

func TestSOCKS5MicrosocksAuth(t *testing.T) {
	echo := echoServer(t)
	addr := microsocks.Start(t, &microsocks.Options{User: "bob", Pass: "pa55"}).String()
	d, err := upstream.Parse("socks5h://bob:pa55@"+addr, nil)
	require.NoError(t, err)
	c, err := d.DialContext(t.Context(), "tcp", echo)
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "authenticated through microsocks")

	d, err = upstream.Parse("socks5://bob:nope@"+addr, nil)
	require.NoError(t, err)
	_, err = d.DialContext(t.Context(), "tcp", echo)
	require.Error(t, err, "wrong credentials are refused")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
}

// TestSOCKS5Context has a SOCKS5 "server" that accepts and never
// answers: the dial ends at ctx's deadline, as a timeout.
func TestSOCKS5Context(t *testing.T) {
	silent := serve(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	d, err := upstream.Parse("socks5://"+silent, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", "198.18.0.1:80")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a dial past its deadline times out: %v", err)
}
