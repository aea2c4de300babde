package sandbox

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
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
