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
	Execute   *string         `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
}

// apiAddArgs are add_hostfwd's arguments, named and typed as slirp4netns's.
type apiAddArgs struct {
	Proto     string `json:"proto"`
	HostAddr  string `json:"host_addr"`
	HostPort  int    `json:"host_port"`
	GuestAddr string `json:"guest_addr"`
	GuestPort int    `json:"guest_port"`
}

// apiEntry is one entry of list_hostfwd, as slirp4netns lists them: the
// IPv4 fields when the forward takes IPv4, the *6 ones when it takes
// IPv6, both for a wildcard host address with IPv6 on.
type apiEntry struct {
	ID         int    `json:"id"`
	Proto      string `json:"proto"`
	HostAddr   string `json:"host_addr,omitempty"`
	HostAddr6  string `json:"host_addr6,omitempty"`
	HostPort   int    `json:"host_port"`
	GuestAddr  string `json:"guest_addr,omitempty"`
	GuestAddr6 string `json:"guest_addr6,omitempty"`
	GuestPort  int    `json:"guest_port"`
}

// ServeAPI listens on the unix socket at path for requests that add, list
// and remove port forwards while the sandbox runs, in slirp4netns's API
// (--api-socket), so that a supervisor written for it (rootlesskit's
// slirp4netns port driver, podman) can drive ustack: one JSON request per
// connection (the client may shut its side down after it, as slirp4netns
// requires), answered with {"return": {...}} or {"error": {"desc": "..."}},
// then closed.
//
//	{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "0.0.0.0", "host_port": 8080, "guest_addr": "198.18.0.100", "guest_port": 80}}
//	-> {"return":{"id":1}}
//	{"execute": "list_hostfwd"}
//	-> {"return":{"entries":[{"id":1,"proto":"tcp","host_addr":"0.0.0.0","host_addr6":"::","host_port":8080,"guest_addr":"198.18.0.100","guest_addr6":"fd00:198:18::100","guest_port":80}]},"entries":[...]}
//	{"execute": "remove_hostfwd", "arguments": {"id": 1}}
//	-> {"return":{}}
//
// As in slirp4netns: proto is tcp or udp, or tcp4, udp4, tcp6, udp6 for
// one family; host_addr empty, "0.0.0.0" or "::" listens on both
// families; guest_addr empty is the sandbox's address. guest_addr, if
// given, must be the sandbox's address of the family. host_port 0, which
// slirp4netns refuses, picks a free port (list_hostfwd tells which). The
// socket is removed and its goroutines stopped by Close.
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
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := json.Marshal(s.apiAnswer(io.LimitReader(c, 1<<16)))
		c.Write(b)
	})
	return nil
}

// apiError is an error answer; desc starts "bad request: " as
// slirp4netns's do.
func apiError(format string, a ...any) any {
	return map[string]any{"error": map[string]string{"desc": "bad request: " + fmt.Sprintf(format, a...)}}
}

// apiAnswer reads the one request of a connection, carries it out and
// returns the answer.
func (s *Sandbox) apiAnswer(r io.Reader) any {
	var req apiRequest
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return apiError("cannot parse JSON: %v", err)
	}
	if req.Execute == nil {
		return apiError("no execute found")
	}
	switch *req.Execute {
	case "add_hostfwd":
		var a apiAddArgs
		if err := json.Unmarshal(req.Arguments, &a); err != nil {
			return apiError("add_hostfwd: bad arguments: %v", err)
		}
		f, err := s.apiForward(a)
		if err != nil {
			return apiError("add_hostfwd: %v", err)
		}
		info, err := s.AddPortForward(f)
		if err != nil {
			return apiError("add_hostfwd: %v", err)
		}
		return map[string]any{"return": map[string]int{"id": info.ID}}
	case "list_hostfwd":
		entries := []apiEntry{}
		for _, info := range s.PortForwards() {
			entries = append(entries, s.apiEntry(info))
		}
		// slirp4netns's manual (and the test of its API) answer
		// {"return": {"entries": [...]}}, while its released binaries
		// answer {"entries": [...]}: both are given, so that clients
		// written against either find the list.
		return map[string]any{"return": map[string]any{"entries": entries}, "entries": entries}
	case "remove_hostfwd":
		var a struct {
			ID *int `json:"id"`
		}
		if err := json.Unmarshal(req.Arguments, &a); err != nil || a.ID == nil {
			return apiError("remove_hostfwd: bad arguments.id: want {\"id\": N}")
		}
		if err := s.RemovePortForward(*a.ID); err != nil {
			return apiError("remove_hostfwd: bad arguments.id: %v", err)
		}
		return map[string]any{"return": map[string]any{}}
	}
	return apiError("unknown execute %q: use add_hostfwd, list_hostfwd or remove_hostfwd", *req.Execute)
}

// apiEntry is info as list_hostfwd lists it.
func (s *Sandbox) apiEntry(info PortForwardInfo) apiEntry {
	f := info.PortForward
	e := apiEntry{ID: info.ID, Proto: f.proto(), HostPort: int(info.Addr.Port()), GuestPort: int(f.Port)}
	host := f.Host.Addr()
	if host.Is4() || host.IsUnspecified() {
		e.HostAddr = netip.IPv4Unspecified().String()
		if !host.IsUnspecified() {
			e.HostAddr = host.String()
		}
		e.GuestAddr = s.cfg.Addr4.Addr().String()
	}
	if (host.Is6() || host.IsUnspecified()) && !s.cfg.NoIPv6 {
		e.HostAddr6 = netip.IPv6Unspecified().String()
		if !host.IsUnspecified() {
			e.HostAddr6 = host.String()
		}
		e.GuestAddr6 = s.cfg.Addr6.Addr().String()
	}
	return e
}

// apiForward turns add_hostfwd's arguments into a Forward. Errors name
// the argument as slirp4netns's do ("bad arguments.proto").
func (s *Sandbox) apiForward(a apiAddArgs) (PortForward, error) {
	var f PortForward
	proto, family := a.Proto, ""
	if n := len(proto); n == 4 && (proto[3] == '4' || proto[3] == '6') {
		proto, family = proto[:3], proto[3:]
	}
	switch proto {
	case "tcp":
	case "udp":
		f.UDP = true
	default:
		return f, fmt.Errorf("bad arguments.proto %q: use tcp or udp (tcp4, udp4, tcp6, udp6 for one family)", a.Proto)
	}
	host := netip.IPv4Unspecified()
	switch a.HostAddr {
	case "", "0.0.0.0", "::", "::0":
	default:
		var err error
		if host, err = netip.ParseAddr(a.HostAddr); err != nil {
			return f, fmt.Errorf("bad arguments.host_addr %q: not an IP address", a.HostAddr)
		}
		host = host.Unmap()
	}
	switch {
	case host.Is6() && s.cfg.NoIPv6:
		return f, fmt.Errorf("bad arguments.host_addr %v: IPv6 is off in the sandbox", host)
	case family == "6" && s.cfg.NoIPv6:
		return f, fmt.Errorf("bad arguments.proto %q: IPv6 is off in the sandbox", a.Proto)
	case family != "" && host.IsUnspecified():
		// A wildcard forward listens on both families at once here.
		return f, fmt.Errorf("bad arguments.proto %q with a wildcard host_addr: ustack's wildcard forwards take IPv4 and IPv6 together: use proto %q, or give an IPv%s host_addr", a.Proto, proto, family)
	case family == "4" && !host.Is4(), family == "6" && !host.Is6():
		return f, fmt.Errorf("bad arguments.host_addr %v: not an IPv%s address, as proto %q asks", host, family, a.Proto)
	}
	if a.HostPort < 0 || a.HostPort > 65535 {
		return f, fmt.Errorf("bad arguments.host_port %d: want a port (0 picks one)", a.HostPort)
	}
	if a.GuestPort < 1 || a.GuestPort > 65535 {
		return f, fmt.Errorf("bad arguments.guest_port %d: want a port", a.GuestPort)
	}
	f.Host = netip.AddrPortFrom(host, uint16(a.HostPort))
	f.Port = uint16(a.GuestPort)
	if a.GuestAddr != "" {
		g, err := netip.ParseAddr(a.GuestAddr)
		if err != nil {
			return f, fmt.Errorf("bad arguments.guest_addr %q: not an IP address", a.GuestAddr)
		}
		if g = g.Unmap(); g != s.sandboxAddr(f, host) && !(host.IsUnspecified() && (g == s.cfg.Addr4.Addr() || g == s.cfg.Addr6.Addr())) {
			return f, fmt.Errorf("bad arguments.guest_addr %v: forwards go to the sandbox's address, %v", g, s.sandboxAddr(f, host))
		}
	}
	return f, nil
}
