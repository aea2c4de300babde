package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAPIForward checks add_hostfwd's arguments as slirp4netns takes them:
// proto with or without a family, wildcard host addresses, the sandbox's
// address as guest_addr, and errors naming the argument.
func TestAPIForward(t *testing.T) {
	cfg, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{cfg: cfg}
	a4, a6 := cfg.Addr4.Addr().String(), cfg.Addr6.Addr().String()
	for _, tc := range []struct {
		args apiAddArgs
		want string // the Forward, or the error's start
	}{
		{apiAddArgs{Proto: "tcp", HostAddr: "0.0.0.0", HostPort: 8080, GuestAddr: a4, GuestPort: 80}, "0.0.0.0:8080:80"},
		{apiAddArgs{Proto: "tcp", HostPort: 8080, GuestPort: 80}, "0.0.0.0:8080:80"},
		{apiAddArgs{Proto: "udp", HostAddr: "::", HostPort: 53, GuestAddr: a6, GuestPort: 53}, "0.0.0.0:53:53/udp"},
		{apiAddArgs{Proto: "tcp4", HostAddr: "127.0.0.1", HostPort: 1, GuestPort: 2}, "127.0.0.1:1:2"},
		{apiAddArgs{Proto: "tcp6", HostAddr: "::1", HostPort: 1, GuestAddr: a6, GuestPort: 2}, "[::1]:1:2"},
		{apiAddArgs{Proto: "sctp", HostPort: 1, GuestPort: 2}, "bad arguments.proto"},
		{apiAddArgs{Proto: "tcp4", HostAddr: "0.0.0.0", HostPort: 1, GuestPort: 2}, "bad arguments.proto"},
		{apiAddArgs{Proto: "tcp4", HostAddr: "::1", HostPort: 1, GuestPort: 2}, "bad arguments.host_addr"},
		{apiAddArgs{Proto: "tcp", HostAddr: "localhost", HostPort: 1, GuestPort: 2}, "bad arguments.host_addr"},
		{apiAddArgs{Proto: "tcp", HostPort: 70000, GuestPort: 2}, "bad arguments.host_port"},
		{apiAddArgs{Proto: "tcp", HostPort: 1}, "bad arguments.guest_port"},
		{apiAddArgs{Proto: "tcp", HostAddr: "127.0.0.1", HostPort: 1, GuestAddr: "10.0.2.100", GuestPort: 2}, "bad arguments.guest_addr"},
		{apiAddArgs{Proto: "tcp", HostAddr: "127.0.0.1", HostPort: 1, GuestAddr: a6, GuestPort: 2}, "bad arguments.guest_addr"},
	} {
		var got string
		r, err := parseHostfwd(tc.args)
		if err == nil {
			var f PortForward
			f, err = s.apiForward(r)
			got = f.String()
		}
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: got %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestAPIAnswer checks the answers that need no forward, shaped as
// slirp4netns's: errors as {"error": {"desc": "bad request: ..."}}, and
// an empty list both ways it is given.
func TestAPIAnswer(t *testing.T) {
	cfg, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{cfg: cfg}
	p, err := NewPortForwarder(&PortForwarderOptions{Dial: (&net.Dialer{}).DialContext})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for req, want := range map[string]string{
		`badjson`:                       `{"error":{"desc":"bad request: cannot parse JSON`,
		`{"unexpectedjson": 42}`:        `{"error":{"desc":"bad request: no execute found"}}`,
		`{"execute": "bad"}`:            `{"error":{"desc":"bad request: unknown execute`,
		`{"execute": "list_hostfwd"}`:   `{"entries":[],"return":{"entries":[]}}`,
		`{"execute": "remove_hostfwd"}`: `{"error":{"desc":"bad request: remove_hostfwd: bad arguments.id`,
		`{"execute": "remove_hostfwd", "arguments": {"id": 7}}`:          `{"error":{"desc":"bad request: remove_hostfwd: bad arguments.id`,
		`{"execute": "add_hostfwd", "arguments": {"proto": "bad"}}`:      `{"error":{"desc":"bad request: add_hostfwd: bad arguments.proto`,
		`{"execute": "add_hostfwd", "arguments": {"host_port": "8080"}}`: `{"error":{"desc":"bad request: add_hostfwd: bad arguments`,
	} {
		b, err := json.Marshal(p.apiAnswer(strings.NewReader(req), s.hostfwdAPI()))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), want) {
			t.Errorf("%s: got %s, want %s...", req, b, want)
		}
	}
}

// TestAPIEntry checks list_hostfwd's entries: the IPv4 fields, the IPv6
// ones, or both for a wildcard, as slirp4netns lists them.
func TestAPIEntry(t *testing.T) {
	for _, noIPv6 := range []bool{false, true} {
		cfg, err := Config{NoIPv6: noIPv6}.normalize()
		if err != nil {
			t.Fatal(err)
		}
		s := &Sandbox{cfg: cfg}
		a4, a6 := cfg.Addr4.Addr().String(), cfg.Addr6.Addr().String()
		for _, tc := range []struct {
			host string
			want HostfwdEntry
		}{
			{"0.0.0.0", HostfwdEntry{HostAddr: "0.0.0.0", HostAddr6: "::", GuestAddr: a4, GuestAddr6: a6}},
			{"127.0.0.1", HostfwdEntry{HostAddr: "127.0.0.1", GuestAddr: a4}},
			{"::1", HostfwdEntry{HostAddr6: "::1", GuestAddr6: a6}},
		} {
			if noIPv6 {
				if tc.host == "::1" {
					continue
				}
				tc.want.HostAddr6, tc.want.GuestAddr6 = "", ""
			}
			tc.want.ID, tc.want.Proto, tc.want.HostPort, tc.want.GuestPort = 3, "udp", 4000, 53
			f := PortForward{UDP: true, Host: netip.AddrPortFrom(netip.MustParseAddr(tc.host), 0), Port: 53}
			got := s.apiEntry(f, HostfwdEntry{ID: 3, Proto: "udp", HostPort: 4000, GuestPort: 53})
			if got != tc.want {
				t.Errorf("IPv6 off %v, host %s: got %+v, want %+v", noIPv6, tc.host, got, tc.want)
			}
		}
	}
}

// TestServeAPI drives the API over its unix socket as rootlesskit's
// slirp4netns port driver does, one connection per request: a forward
// added on a port picked for it is listed with that port and listens
// there, is removed, and Close removes the socket.
func TestServeAPI(t *testing.T) {
	cfg, err := Config{}.normalize()
	require.NoError(t, err)
	s := &Sandbox{cfg: cfg}
	// Forwards that nothing connects to need no Forwarder behind them:
	// a dial that is never called stands in.
	s.pf, err = NewPortForwarder(&PortForwarderOptions{Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, errors.New("not dialled in this test")
	}})
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "api.sock")
	require.NoError(t, s.ServeAPI(sock))
	call := func(req string) map[string]any {
		t.Helper()
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte(req))
		require.NoError(t, err)
		require.NoError(t, c.(*net.UnixConn).CloseWrite())
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := io.ReadAll(c)
		require.NoError(t, err)
		var ans map[string]any
		require.NoError(t, json.Unmarshal(b, &ans), "%s", b)
		return ans
	}
	added := call(`{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "127.0.0.1", "host_port": 0, "guest_port": 80}}`)
	require.Contains(t, added, "return", "%v", added)
	id := added["return"].(map[string]any)["id"].(float64)
	list := call(`{"execute": "list_hostfwd"}`)
	entries := list["entries"].([]any)
	require.Len(t, entries, 1)
	e := entries[0].(map[string]any)
	require.Equal(t, id, e["id"])
	require.Equal(t, "127.0.0.1", e["host_addr"])
	port := int(e["host_port"].(float64))
	require.NotZero(t, port, "host_port 0 picks a port, which the list shows")
	at := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String()
	_, err = net.Listen("tcp", at)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "the forward listens on the port listed")
	require.Contains(t, call(fmt.Sprintf(`{"execute": "remove_hostfwd", "arguments": {"id": %d}}`, int(id))), "return")
	require.Empty(t, call(`{"execute": "list_hostfwd"}`)["entries"])
	require.Contains(t, call(fmt.Sprintf(`{"execute": "remove_hostfwd", "arguments": {"id": %d}}`, int(id))), "error", "removed twice")
	require.NoError(t, s.Close())
	_, err = os.Stat(sock)
	require.True(t, os.IsNotExist(err), "Close removes the socket: %v", err)
}
