package microsocks_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/microsocks"
)

// greet offers SOCKS5 (RFC 1928 3) the "no authentication" method alone
// and returns the method the server chose.
func greet(t *testing.T, c net.Conn) byte {
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Write([]byte{5, 1, 0})
	require.NoError(t, err)
	var reply [2]byte
	_, err = io.ReadFull(c, reply[:])
	require.NoError(t, err)
	require.Equal(t, byte(5), reply[0], "a SOCKS5 reply")
	return reply[1]
}

// TestStart: the server Start returns speaks SOCKS5 at once, and asks for
// the credentials it was given.
func TestStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   *microsocks.Options
		method byte // what it answers an offer of no authentication
	}{
		{"open", nil, 0},
		{"credentials", &microsocks.Options{User: "bob", Pass: "pa55"}, 0xff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := microsocks.Start(t, tc.opts)
			c, err := net.Dial("tcp", addr.String())
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, tc.method, greet(t, c))
		})
	}
}
