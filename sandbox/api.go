package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
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

// HostfwdEntry is one entry of list_hostfwd, as slirp4netns lists them:
// the IPv4 fields when the forward takes IPv4, the *6 ones when it takes
// IPv6, both for a wildcard host address with IPv6 on.
type HostfwdEntry struct {
	ID         int    `json:"id"`
	Proto      string `json:"proto"`
	HostAddr   string `json:"host_addr,omitempty"`
	HostAddr6  string `json:"host_addr6,omitempty"`
	HostPort   int    `json:"host_port"`
	GuestAddr  string `json:"guest_addr,omitempty"`
	GuestAddr6 string `json:"guest_addr6,omitempty"`
	GuestPort  int    `json:"guest_port"`
}

// HostfwdRequest is add_hostfwd's arguments with their form checked, for
// HostfwdAPI.Forward to check where the forward goes.
type HostfwdRequest struct {
	// UDP forwards datagrams; otherwise TCP connections.
	UDP bool
	// Family is 4 or 6 where proto names one (tcp4, udp6, ...), else 0.
	Family int
	// Host is host_addr and host_port: 0.0.0.0 (a wildcard, both
	// families) for host_addr "", "0.0.0.0" or "::".
	Host netip.AddrPort
	// Guest is guest_addr, invalid where it was not given; GuestPort is
	// guest_port.
	Guest     netip.Addr
	GuestPort uint16
}

// HostfwdAPI is what a PortForwarder's owner decides in slirp4netns's
// API (ServeAPI): where a forward may go, and how list_hostfwd shows it.
type HostfwdAPI struct {
	// Forward returns the forward add_hostfwd asks for, or why not,
	// naming the argument as slirp4netns's errors do ("bad
	// arguments.guest_addr ...").
	Forward func(HostfwdRequest) (HostForward, error)
	// Entry fills in the address fields of list_hostfwd's entry e for
	// info, whose ID, proto and ports are filled in already.
	Entry func(info HostForwardInfo, e HostfwdEntry) HostfwdEntry
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
	return s.pf.ServeAPI(path, s.hostfwdAPI())
}

// hostfwdAPI is the sandbox's side of its API: forwards go to the
// sandbox's address of the host client's IP version.
func (s *Sandbox) hostfwdAPI() HostfwdAPI {
	return HostfwdAPI{
		Forward: func(r HostfwdRequest) (HostForward, error) {
			f, err := s.apiForward(r)
			return s.hostForward(f), err
		},
		Entry: func(info HostForwardInfo, e HostfwdEntry) HostfwdEntry {
			return s.apiEntry(portForward(info.HostForward), e)
		},
	}
}

// ServeAPI listens on the unix socket at path for slirp4netns's API
// requests (see Sandbox.ServeAPI), carried out on p's forwards as api
// decides. The socket is removed, and its goroutines stopped, by Close.
func (p *PortForwarder) ServeAPI(path string, api HostfwdAPI) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("sandbox: API socket: %w", err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return errClosed
	}
	p.fixed = append(p.fixed, ln)
	p.wg.Add(1)
	p.mu.Unlock()
	go acceptEach(p, ln.Accept, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := json.Marshal(p.apiAnswer(io.LimitReader(c, 1<<16), api))
		c.Write(b)
	})
	return nil
}

// apiError is an error answer; desc starts "bad request: " as
// slirp4netns's do.
func apiError(format string, a ...any) any {
	return map[string]any{"error": map[string]string{"desc": "bad request: " + fmt.Sprintf(format, a...)}}
}

// apiAnswer reads the one request of a connection, carries it out on
// p's forwards as api decides, and returns the answer.
func (p *PortForwarder) apiAnswer(r io.Reader, api HostfwdAPI) any {
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
		hr, err := parseHostfwd(a)
		if err != nil {
			return apiError("add_hostfwd: %v", err)
		}
		f, err := api.Forward(hr)
		if err != nil {
			return apiError("add_hostfwd: %v", err)
		}
		if start := UnprivilegedPortStart(); int(f.Host.Port()) < start && f.Host.Port() != 0 {
			return apiError("add_hostfwd: bad arguments.host_port %d: binding it needs CAP_NET_BIND_SERVICE (ports below %d, sysctl net.ipv4.ip_unprivileged_port_start)", f.Host.Port(), start)
		}
		info, err := p.Add(f)
		if err != nil {
			return apiError("add_hostfwd: %v", err)
		}
		return map[string]any{"return": map[string]int{"id": info.ID}}
	case "list_hostfwd":
		entries := []HostfwdEntry{}
		for _, info := range p.List() {
			e := HostfwdEntry{ID: info.ID, Proto: "tcp", HostPort: int(info.Addr.Port())}
			if info.UDP {
				e.Proto = "udp"
			}
			if to, err := netip.ParseAddrPort(info.To); err == nil {
				e.GuestPort = int(to.Port())
			} else if _, port, err := net.SplitHostPort(info.To); err == nil {
				e.GuestPort, _ = strconv.Atoi(port)
			}
			entries = append(entries, api.Entry(info, e))
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
		if err := p.Remove(*a.ID); err != nil {
			return apiError("remove_hostfwd: bad arguments.id: %v", err)
		}
		return map[string]any{"return": map[string]any{}}
	}
	return apiError("unknown execute %q: use add_hostfwd, list_hostfwd or remove_hostfwd", *req.Execute)
}

// apiEntry fills in list_hostfwd's address fields for one of the
// sandbox's forwards.
func (s *Sandbox) apiEntry(f PortForward, e HostfwdEntry) HostfwdEntry {
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

// parseHostfwd checks the form of add_hostfwd's arguments. Errors name
// the argument as slirp4netns's do ("bad arguments.proto").
func parseHostfwd(a apiAddArgs) (HostfwdRequest, error) {
	var r HostfwdRequest
	proto, family := a.Proto, ""
	if n := len(proto); n == 4 && (proto[3] == '4' || proto[3] == '6') {
		proto, family = proto[:3], proto[3:]
		r.Family = int(family[0] - '0')
	}
	switch proto {
	case "tcp":
	case "udp":
		r.UDP = true
	default:
		return r, fmt.Errorf("bad arguments.proto %q: use tcp or udp (tcp4, udp4, tcp6, udp6 for one family)", a.Proto)
	}
	host := netip.IPv4Unspecified()
	switch a.HostAddr {
	case "", "0.0.0.0", "::", "::0":
	default:
		var err error
		if host, err = netip.ParseAddr(a.HostAddr); err != nil {
			return r, fmt.Errorf("bad arguments.host_addr %q: not an IP address", a.HostAddr)
		}
		host = host.Unmap()
	}
	switch {
	case family != "" && host.IsUnspecified():
		// A wildcard forward listens on both families at once here.
		return r, fmt.Errorf("bad arguments.proto %q with a wildcard host_addr: ustack's wildcard forwards take IPv4 and IPv6 together: use proto %q, or give an IPv%s host_addr", a.Proto, proto, family)
	case family == "4" && !host.Is4(), family == "6" && !host.Is6():
		return r, fmt.Errorf("bad arguments.host_addr %v: not an IPv%s address, as proto %q asks", host, family, a.Proto)
	}
	if a.HostPort < 0 || a.HostPort > 65535 {
		return r, fmt.Errorf("bad arguments.host_port %d: want a port (0 picks one)", a.HostPort)
	}
	if a.GuestPort < 1 || a.GuestPort > 65535 {
		return r, fmt.Errorf("bad arguments.guest_port %d: want a port", a.GuestPort)
	}
	r.Host = netip.AddrPortFrom(host, uint16(a.HostPort))
	r.GuestPort = uint16(a.GuestPort)
	if a.GuestAddr != "" {
		g, err := netip.ParseAddr(a.GuestAddr)
		if err != nil {
			return r, fmt.Errorf("bad arguments.guest_addr %q: not an IP address", a.GuestAddr)
		}
		r.Guest = g.Unmap()
	}
	return r, nil
}

// apiForward checks where a forward add_hostfwd asks for goes: the
// sandbox's address of the host's IP version (either, for a wildcard),
// with IPv6 only where it is on.
func (s *Sandbox) apiForward(r HostfwdRequest) (PortForward, error) {
	f := PortForward{UDP: r.UDP, Host: r.Host, Port: r.GuestPort}
	host := r.Host.Addr()
	switch {
	case host.Is6() && s.cfg.NoIPv6:
		return f, fmt.Errorf("bad arguments.host_addr %v: IPv6 is off in the sandbox", host)
	case r.Family == 6 && s.cfg.NoIPv6:
		return f, fmt.Errorf("bad arguments.proto: IPv6 is off in the sandbox")
	}
	if g := r.Guest; g.IsValid() {
		want := s.cfg.Addr4.Addr()
		if host.Is6() && !host.IsUnspecified() && !s.cfg.NoIPv6 {
			want = s.cfg.Addr6.Addr()
		}
		if g != want && !(host.IsUnspecified() && (g == s.cfg.Addr4.Addr() || g == s.cfg.Addr6.Addr() && !s.cfg.NoIPv6)) {
			return f, fmt.Errorf("bad arguments.guest_addr %v: forwards go to the sandbox's address, %v", g, want)
		}
	}
	return f, nil
}
