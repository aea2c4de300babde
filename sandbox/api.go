package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// apiRequest is a request on the API socket, as slirp4netns takes them:
// {"execute": "add_hostfwd", "arguments": {...}}.
type apiRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
}

// apiHostfwd is a port forward in the API's terms (slirp4netns's
// hostfwd): the arguments of add_hostfwd and the entries of list_hostfwd.
type apiHostfwd struct {
	ID        int    `json:"id,omitempty"`
	Proto     string `json:"proto"`
	HostAddr  string `json:"host_addr"`
	HostPort  int    `json:"host_port"`
	GuestAddr string `json:"guest_addr"`
	GuestPort int    `json:"guest_port"`
}

// ServeAPI listens on the unix socket at path for requests that add, list
// and remove port forwards while the sandbox runs, in slirp4netns's API
// (--api-socket), so that a supervisor written for it (rootlesskit,
// podman) can drive ustack: one JSON request per connection, answered
// with {"return": {...}} or {"error": {"desc": "..."}}, then closed.
//
//	{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "0.0.0.0", "host_port": 8080, "guest_addr": "198.18.0.100", "guest_port": 80}}
//	-> {"return": {"id": 1}}
//	{"execute": "list_hostfwd"}
//	-> {"return": {"entries": [{"id": 1, "proto": "tcp", ...}]}}
//	{"execute": "remove_hostfwd", "arguments": {"id": 1}}
//	-> {"return": {}}
//
// guest_addr may be empty or the sandbox's address of host_addr's
// family; host_addr empty means 0.0.0.0, as in slirp4netns. The socket
// is removed and its goroutines stopped by Close.
func (s *Sandbox) ServeAPI(path string) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("sandbox: API socket: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return errors.New("sandbox: closed")
	}
	s.closers = append(s.closers, ln)
	s.wg.Add(1)
	s.mu.Unlock()
	go acceptEach(s, ln.Accept, func(c net.Conn) {
		defer c.Close()
		s.serveAPIConn(c)
	})
	return nil
}

// serveAPIConn answers the one request of a connection.
func (s *Sandbox) serveAPIConn(c net.Conn) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var req apiRequest
	dec := json.NewDecoder(io.LimitReader(c, 1<<16))
	reply := func(v any) { json.NewEncoder(c).Encode(v) }
	fail := func(format string, a ...any) {
		reply(map[string]any{"error": map[string]string{"desc": fmt.Sprintf(format, a...)}})
	}
	if err := dec.Decode(&req); err != nil {
		fail("bad request: %v", err)
		return
	}
	switch req.Execute {
	case "add_hostfwd":
		var a apiHostfwd
		if err := json.Unmarshal(req.Arguments, &a); err != nil {
			fail("bad request: add_hostfwd: %v", err)
			return
		}
		f, err := s.apiForward(a)
		if err != nil {
			fail("bad request: add_hostfwd: %v", err)
			return
		}
		info, err := s.AddForward(f)
		if err != nil {
			fail("add_hostfwd: %v", err)
			return
		}
		reply(map[string]any{"return": map[string]int{"id": info.ID}})
	case "list_hostfwd":
		entries := []apiHostfwd{}
		for _, info := range s.Forwards() {
			f := info.Forward
			entries = append(entries, apiHostfwd{
				ID: info.ID, Proto: f.proto(), HostAddr: f.Host.Addr().String(), HostPort: int(info.Addr.Port()),
				GuestAddr: s.sandboxAddr(f, f.Host.Addr()).String(), GuestPort: int(f.Port),
			})
		}
		reply(map[string]any{"return": map[string]any{"entries": entries}})
	case "remove_hostfwd":
		var a struct {
			ID *int `json:"id"`
		}
		if err := json.Unmarshal(req.Arguments, &a); err != nil || a.ID == nil {
			fail("bad request: remove_hostfwd: want {\"id\": N}")
			return
		}
		if err := s.RemoveForward(*a.ID); err != nil {
			fail("remove_hostfwd: %v", err)
			return
		}
		reply(map[string]any{"return": map[string]any{}})
	default:
		fail("bad request: unknown execute %q: use add_hostfwd, list_hostfwd or remove_hostfwd", req.Execute)
	}
}

// apiForward turns add_hostfwd's arguments into a Forward.
func (s *Sandbox) apiForward(a apiHostfwd) (Forward, error) {
	var f Forward
	switch a.Proto {
	case "tcp", "":
	case "udp":
		f.UDP = true
	default:
		return f, fmt.Errorf("proto %q: use tcp or udp", a.Proto)
	}
	host := netip.IPv4Unspecified()
	if a.HostAddr != "" {
		var err error
		if host, err = netip.ParseAddr(a.HostAddr); err != nil {
			return f, fmt.Errorf("host_addr %q: not an IP address", a.HostAddr)
		}
	}
	if a.HostPort < 0 || a.HostPort > 65535 || a.GuestPort < 1 || a.GuestPort > 65535 {
		return f, fmt.Errorf("host_port %d, guest_port %d: want ports (host_port 0 picks one)", a.HostPort, a.GuestPort)
	}
	f.Host = netip.AddrPortFrom(host.Unmap(), uint16(a.HostPort))
	f.Port = uint16(a.GuestPort)
	if a.GuestAddr != "" {
		g, err := netip.ParseAddr(a.GuestAddr)
		if err != nil {
			return f, fmt.Errorf("guest_addr %q: not an IP address", a.GuestAddr)
		}
		if g = g.Unmap(); g != s.sandboxAddr(f, host) && !(host.IsUnspecified() && (g == s.cfg.Addr4.Addr() || g == s.cfg.Addr6.Addr())) {
			return f, fmt.Errorf("guest_addr %v: forwards go to the sandbox's address, %v", g, s.sandboxAddr(f, host))
		}
	}
	return f, nil
}
