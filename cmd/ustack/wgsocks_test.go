package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// socksSeeds are requests and datagram headers as real clients send
// them: curl --socks5-hostname (a name), curl --socks5 (an address), an
// IPv6 CONNECT, x/net/proxy's, a UDP ASSOCIATE with an all-zero address,
// and broken ones.
var socksSeeds = [][]byte{
	[]byte("\x05\x01\x00\x03\x0bexample.com\x00\x50"),
	[]byte("\x05\x01\x00\x01\xc6\x13\x00\x02\x01\xbb"),
	append(append([]byte("\x05\x01\x00\x04"), netip.MustParseAddr("fd00::2").AsSlice()...), 0x00, 0x16),
	[]byte("\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00"),
	[]byte("\x05\x01\x00\x03\x0b198.19.0.2\x00\x07"),
	[]byte("\x04\x01\x00\x50\x01\x02\x03\x04"),
	[]byte("\x05\x01\x00\x05\x01\x02"),
	[]byte("\x05\x01\x00\x03\x00\x00\x50"),
	[]byte("\x05\x01\x00\x03\x20short"),
}

// FuzzSOCKSRequest checks the request parser on any bytes: it never
// panics, consumes exactly the request's length, and what it returns is
// what the bytes say (the port, the address or name).
func FuzzSOCKSRequest(f *testing.F) {
	for _, s := range socksSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		cmd, dst, err := readSOCKSRequest(r)
		if err != nil {
			var se *socksError
			if !errors.As(err, &se) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%q: unexpected error %v", b, err)
			}
			return
		}
		used := len(b) - r.Len()
		require.Equal(t, byte(socksVersion), b[0])
		require.Equal(t, b[1], cmd)
		checkSOCKSAddr(t, b[3], b[4:used], dst)
	})
}

// FuzzSOCKSDatagram checks the UDP header parser on any bytes: it never
// panics, refuses fragments, and returns the payload that follows the
// header it read.
func FuzzSOCKSDatagram(f *testing.F) {
	for _, s := range socksSeeds {
		f.Add(append([]byte{0, 0, 0}, s[3:]...))
	}
	f.Add([]byte("\x00\x00\x01\x01\x01\x02\x03\x04\x00\x35payload"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dst, payload, err := parseSOCKSDatagram(b)
		if err != nil {
			return
		}
		require.Zero(t, b[2], "a fragment was taken")
		hdr := len(b) - len(payload)
		require.Equal(t, b[hdr:], payload)
		checkSOCKSAddr(t, b[3], b[4:hdr], dst)
	})
}

// checkSOCKSAddr checks that dst is what raw, an address of type atyp
// and its port, says.
func checkSOCKSAddr(t *testing.T, atyp byte, raw []byte, dst socksAddr) {
	t.Helper()
	require.GreaterOrEqual(t, len(raw), 2)
	require.Equal(t, binary.BigEndian.Uint16(raw[len(raw)-2:]), dst.port)
	host := raw[:len(raw)-2]
	switch atyp {
	case socksIPv4, socksIPv6:
		want, ok := netip.AddrFromSlice(host)
		require.True(t, ok)
		require.Equal(t, want.Unmap(), dst.ip)
		require.Empty(t, dst.name)
	case socksDomain:
		require.Equal(t, int(host[0]), len(host)-1)
		if dst.ip.IsValid() {
			require.Equal(t, dst.ip, netip.MustParseAddr(string(host[1:])).Unmap())
		} else {
			require.Equal(t, string(host[1:]), dst.name)
		}
	default:
		t.Fatalf("address type %d taken", atyp)
	}
}

// TestSOCKSReplies checks destinations as dialers take them, a reply's
// encoding, and the reply code each dial failure gets.
func TestSOCKSReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr socksAddr
		want string
	}{
		{"name", socksAddr{name: "host.test", port: 80}, "host.test:80"},
		{"ipv6", socksAddr{ip: netip.MustParseAddr("fd00::2"), port: 22}, "[fd00::2]:22"},
	} {
		require.Equal(t, tc.want, tc.addr.String(), tc.name)
	}
	reply := socksReply(socksSucceeded, netip.MustParseAddrPort("[fd00::1]:1080"))
	cmd, bound, err := readSOCKSRequest(bytes.NewReader(reply))
	require.NoError(t, err)
	require.Equal(t, byte(socksSucceeded), cmd)
	require.Equal(t, netip.MustParseAddrPort("[fd00::1]:1080"), netip.AddrPortFrom(bound.ip, bound.port))
	for err, want := range map[error]byte{
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}: socksConnRefused,
		&net.OpError{Op: "dial", Err: syscall.ENETUNREACH}:  socksNetUnreachable,
		&net.DNSError{Err: "no such host", Name: "x"}:       socksHostUnreachable,
		context.DeadlineExceeded:                            socksHostUnreachable,
		errors.New("anything else"):                         socksGeneralFailure,
	} {
		require.Equal(t, want, socksCode(err), "%v", err)
	}
}
