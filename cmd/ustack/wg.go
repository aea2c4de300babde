package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// defaultWGMTU is the tunnel's MTU when the file sets none: wg-quick's
// and wireguard-go's default, 1500 less the 80 bytes WireGuard adds over
// IPv6 (40 IPv6, 8 UDP, 32 of its own header and tag).
const defaultWGMTU = 1420

// wgRun is one run of ustack wg: what the relay serves (spec, checked)
// and how it is run.
type wgRun struct {
	spec wgSpec
	// confine serves from a confined relay process (startRelay);
	// otherwise this process serves, unconfined.
	confine bool
	procs   int
	// warnings are said at start: what is allowed but unwise.
	warnings []string
}

// wgSpec is what ustack wg serves, checked: what the supervisor hands its
// relay (as JSON over the spec pipe) or serves itself with -seccomp=false.
type wgSpec struct {
	Name string
	// Config is the configuration file, Marshal'ed back with the peers'
	// endpoint names resolved: it holds the private key.
	Config []byte
	// Relay makes this an exit node: the peers' flows to anything the
	// stack does not own are relayed from host sockets, by Policy.
	Relay             bool
	Allow, Deny       []netip.Prefix // the user's -allow and -deny
	AllowHostLoopback bool
	// DNSUpstream are the resolvers the DNS addresses relay to, by the
	// query's IP version (sandbox.DNSUpstreams); invalid: none.
	DNSUpstream [2]netip.AddrPort
	// Limits, as forward.Options takes them.
	MaxFlows, MaxTCP, MaxUDP, MaxHalfOpen int
	UDPIdleTimeout, ConnectTimeout        time.Duration
	// Forwards (-p) go through the relay to a peer's address; Locals
	// (-L) are dialed through the tunnel, names allowed.
	Forwards, Locals []sandbox.HostForward
	// SOCKS and HTTP are the proxies' host addresses ("" for none), and
	// Auth their credentials ("" for none: USER:PASSWORD).
	SOCKS, HTTP string
	Auth        string
	API         string // the API socket's path, "" for none
	Metrics     string // the metrics' address, "" for none
	Stats       bool   // write the counters at the end
	Verbose     bool   // wireguard-go's verbose log
	Procs       int    // GOMAXPROCS in the relay, 0 for Go's default
	// Profiles are the CPU profile's and the execution trace's files
	// ("" for none), written by the serving process.
	Profiles [2]string
}

func wgMain(args []string, stdout, stderr io.Writer) int {
	r, status, ok := parseWG(args, stderr)
	if !ok {
		return status
	}
	return r.run(stderr)
}

// parseWG parses and checks ustack wg's command line and its
// configuration file: every mistake is reported here, before anything
// starts. When it reports !ok the command returns status at once (0
// after -h, 2 for a bad command line or file, which it has reported).
func parseWG(args []string, stderr io.Writer) (r wgRun, status int, ok bool) {
	fs := flag.NewFlagSet("ustack wg", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var allow, deny, fwds, locals listFlag
	var (
		config     = fs.String("config", "", "the WireGuard configuration file, in wg-quick's format (required): [Interface] PrivateKey, ListenPort, Address, DNS, MTU; [Peer] PublicKey, PresharedKey, AllowedIPs, Endpoint, PersistentKeepalive")
		relay      = fs.Bool("relay", true, "be an exit node: relay the peers' flows to anything ustack does not own from host sockets (-allow, -deny), and answer DNS queries to the [Interface] DNS addresses through the host's resolver")
		hostLoop   = fs.Bool("allow-host-loopback", false, "let the peers reach the host's loopback (127.0.0.1, ::1) at this endpoint's own tunnel addresses ([Interface] Address)")
		upstream   = fs.String("dns-upstream", "", "resolver the DNS addresses relay to, ADDR[:PORT] (default: the host's first nameserver); off refuses DNS queries")
		socks      = fs.String("socks", "", "serve a SOCKS5 proxy (CONNECT and UDP ASSOCIATE) into the tunnel on this host address, e.g. 127.0.0.1:1080")
		httpAddr   = fs.String("http", "", "serve an HTTP proxy (CONNECT, and plain http:// requests) into the tunnel on this host address, e.g. 127.0.0.1:8080")
		authFile   = fs.String("proxy-auth", "", "a file holding USER:PASSWORD on one line: -socks then asks for it (RFC 1929) and -http for its Basic Proxy-Authorization")
		apiSocket  = fs.String("api-socket", "", "serve slirp4netns's API (add_hostfwd, list_hostfwd, remove_hostfwd) on this unix socket: forwards from the host to a peer's address (guest_addr)")
		maxFlows   = fs.Int("max-flows", forward.DefaultMaxFlows, "most relayed flows at once, all protocols (-1: no limit)")
		maxTCP     = fs.Int("max-tcp", forward.DefaultMaxTCP, "most relayed TCP connections at once (-1: no limit)")
		maxUDP     = fs.Int("max-udp", forward.DefaultMaxUDP, "most relayed UDP mappings at once (-1: no limit)")
		maxHalf    = fs.Int("max-half-open", forward.DefaultMaxHalfOpen, "most relayed TCP handshakes that count at once: those to destinations that have not shown they answer, and any slower than a second (a burst to a live server never counts); one destination holds a quarter of them, one peer half (-1: no limit)")
		udpIdle    = fs.Duration("udp-timeout", forward.DefaultUDPIdleTimeout, "a UDP mapping (relayed or forwarded) ends after this long without traffic")
		connTO     = fs.Duration("connect-timeout", sandbox.DefaultConnectTimeout, "limit on the connect of one TCP connection, relayed or forwarded")
		metricsAt  = fs.String("metrics", "", "serve Prometheus metrics on this host address, e.g. 127.0.0.1:9100")
		printStats = fs.Bool("stats", false, "print the counters on exit: the relay's, the forwards' and each peer's")
		confine    = fs.Bool("seccomp", true, "serve from a relay process of its own, isolated (an empty root) and confined once it has opened its sockets: a seccomp allow-list (a denied system call fails with EPERM), no_new_privs, capabilities dropped; false serves from this process, unconfined")
		procs      = fs.Int("procs", 0, "CPUs ustack runs on at once (GOMAXPROCS); 0: Go's default (every CPU, or $GOMAXPROCS): wireguard-go encrypts and decrypts on every CPU it has")
		verbose    = fs.Bool("verbose", false, "log wireguard-go's handshakes and other events")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the serving process to this file")
		traceFile  = fs.String("trace", "", "write an execution trace of the serving process (go tool trace) to this file")
	)
	fs.Var(&allow, "allow", "CIDR the peers may reach through the relay; repeatable; with any, nothing else is reachable")
	fs.Var(&deny, "deny", "CIDR the peers may not reach; repeatable; wins over -allow")
	fs.Var(&fwds, "p", "expose a peer's service on the host: [HOSTIP:]HOSTPORT:PEERADDR:PORT[/udp] (HOSTIP defaults to 127.0.0.1, IPv6 addresses in brackets), through the relay; repeatable")
	fs.Var(&locals, "L", "local forward into the tunnel: [HOST:]PORT:DEST:PORT[/udp] (HOST defaults to 127.0.0.1; DEST an address or a name, resolved through the tunnel's DNS), as wireproxy and onetun offer; repeatable")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: ustack wg -config FILE [flags]

A WireGuard endpoint in one process, with no root, no TUN device and no
kernel module: wireguard-go speaks the protocol on its own UDP sockets
(ListenPort), and ustack is the network behind it. As an exit node (the
default) it relays the peers' flows to the host's sockets; as a client it
serves SOCKS5 and HTTP proxies and local forwards into the tunnel. It
serves until SIGINT or SIGTERM.

Flags:
`)
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return r, status, false
	}
	usage := func(format string, a ...any) (wgRun, int, bool) {
		fmt.Fprintf(stderr, "ustack wg: "+format+"\n", a...)
		return r, 2, false
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q: ustack wg takes flags only", fs.Arg(0))
	}
	if *config == "" {
		return usage("-config FILE is required: a WireGuard configuration in wg-quick's format")
	}
	if *procs < 0 {
		return usage("-procs %d: want a count of CPUs, or 0 for Go's default", *procs)
	}
	s := &r.spec
	s.Name, s.Relay, s.AllowHostLoopback = "ustack wg", *relay, *hostLoop
	s.MaxFlows, s.MaxTCP, s.MaxUDP, s.MaxHalfOpen = *maxFlows, *maxTCP, *maxUDP, *maxHalf
	s.UDPIdleTimeout, s.ConnectTimeout = *udpIdle, *connTO
	s.SOCKS, s.HTTP, s.API, s.Metrics = *socks, *httpAddr, *apiSocket, *metricsAt
	s.Stats, s.Verbose, s.Procs = *printStats, *verbose, *procs
	s.Profiles = [2]string{*cpuProfile, *traceFile}
	r.confine, r.procs = *confine, *procs
	for _, l := range []struct {
		name string
		n    int
	}{{"-max-flows", *maxFlows}, {"-max-tcp", *maxTCP}, {"-max-udp", *maxUDP}, {"-max-half-open", *maxHalf}} {
		if l.n < -1 {
			return usage("%s %d: want a count, 0 for the default or -1 for no limit", l.name, l.n)
		}
	}
	if *udpIdle <= 0 || *connTO <= 0 {
		return usage("-udp-timeout and -connect-timeout must be positive")
	}
	for _, l := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{{"-allow", allow, &s.Allow}, {"-deny", deny, &s.Deny}} {
		for _, v := range l.in {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return usage("%s %q: want a CIDR such as 198.18.0.0/15 or fd00::/8", l.name, v)
			}
			*l.out = append(*l.out, p.Masked())
		}
	}

	conf, warning, err := readWGConfig(*config)
	if err != nil {
		return usage("-config %v", err)
	}
	if warning != "" {
		r.warnings = append(r.warnings, warning)
	}
	t := newWGTunnel(conf)
	if *hostLoop && !*relay {
		return usage("-allow-host-loopback: the host's loopback is reached through the relay, which -relay=false turns off")
	}
	if *hostLoop {
		for _, a := range conf.Interface.DNS {
			if t.own(a) {
				return usage("-allow-host-loopback: [Interface] DNS %v is also an address of this endpoint's, which stands for the host's loopback: give the DNS service an address of its own in the tunnel (one no peer has)", a)
			}
		}
	}
	for _, v := range fwds {
		if !*relay {
			return usage("-p %s: it reaches the peer through the relay, which -relay=false turns off: use -L, which dials through the tunnel without it", v)
		}
		f, err := parseWGForward(v, false)
		if err == nil {
			err = t.routed(f.To)
		}
		if err != nil {
			return usage("-p %s: %v", v, err)
		}
		s.Forwards = append(s.Forwards, f)
	}
	for _, v := range locals {
		f, err := parseWGForward(v, true)
		if err == nil {
			err = t.routed(f.To)
		}
		if err != nil {
			return usage("-L %s: %v", v, err)
		}
		s.Locals = append(s.Locals, f)
	}
	for _, l := range []struct{ name, v string }{{"-socks", *socks}, {"-http", *httpAddr}, {"-metrics", *metricsAt}} {
		if l.v == "" {
			continue
		}
		if _, err := netip.ParseAddrPort(l.v); err != nil {
			return usage("%s %q: want a host address and port, such as 127.0.0.1:1080 or [::1]:1080", l.name, l.v)
		}
	}
	if *authFile != "" {
		if *socks == "" && *httpAddr == "" {
			return usage("-proxy-auth: it is for -socks and -http, and neither is given")
		}
		if s.Auth, err = readProxyAuth(*authFile); err != nil {
			return usage("-proxy-auth: %v", err)
		}
	}
	if err := checkWGPorts(conf, s); err != nil {
		return usage("%v", err)
	}
	if !*relay {
		// What only the relay uses is refused without it, rather than
		// ignored.
		for _, f := range []string{"allow", "deny", "dns-upstream", "max-flows", "max-tcp", "max-udp", "max-half-open"} {
			if setFlag(fs, f) {
				return usage("-%s: it applies to the relay, which -relay=false turns off", f)
			}
		}
	} else {
		// The DNS service's upstream, which the client side also
		// resolves through.
		switch *upstream {
		case "off":
		case "":
			s.DNSUpstream = sandbox.DNSUpstreams(netip.AddrPort{})
		default:
			ap, err := parseUpstream(*upstream)
			if err != nil {
				return usage("-dns-upstream %q: want ADDR, ADDR:PORT, [ADDR6]:PORT or off", *upstream)
			}
			s.DNSUpstream = sandbox.DNSUpstreams(ap)
		}
	}
	if err := resolveWGEndpoints(conf); err != nil {
		return usage("-config %s: %v", *config, err)
	}
	s.Config = conf.Marshal()
	return r, 0, true
}

// readWGConfig reads and checks a WireGuard configuration file, for
// ustack wg -config and ustack tun -wg; errors name the file. warning,
// if not empty, says the file is readable by others, as wg-quick warns:
// it holds the private key.
func readWGConfig(path string) (conf *wgconf.Config, warning string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warning = fmt.Sprintf("%s is accessible to other users (mode %04o), and it holds the private key: chmod 600 it", path, fi.Mode().Perm())
	}
	if conf, err = wgconf.Parse(b); err == nil {
		err = checkWGConfig(conf)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return conf, warning, nil
}

// resolveWGEndpoints looks up the peers' endpoint names with the host's
// resolver, once, before anything starts: a relay, isolated, has no
// /etc/resolv.conf.
func resolveWGEndpoints(conf *wgconf.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range conf.Peers {
		p := &conf.Peers[i]
		if _, ok := p.Endpoint.AddrPort(); ok || p.Endpoint.IsZero() {
			continue
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", p.Endpoint.Host)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no address")
		}
		if err != nil {
			return fmt.Errorf("peer %d (public key %s): look up its Endpoint %s: %w", i+1, p.PublicKey, p.Endpoint.Host, err)
		}
		p.Endpoint.Host = addrs[0].Unmap().String()
	}
	return nil
}

// checkWGConfig checks what ustack wg needs of a configuration file
// beyond its form (which wgconf.Parse checked).
func checkWGConfig(c *wgconf.Config) error {
	if len(c.Interface.Addresses) == 0 {
		return errors.New("[Interface] has no Address: give this endpoint's tunnel address, such as 10.0.0.1/24")
	}
	if len(c.Peers) == 0 {
		return errors.New("no [Peer]: give at least one")
	}
	if m := c.Interface.MTU; m != 0 && (m < pktio.MinMTU || m > pktio.MaxMTU) {
		return fmt.Errorf("[Interface] MTU %d: ustack's tunnels take %d to %d", m, pktio.MinMTU, pktio.MaxMTU)
	}
	for _, a := range c.Interface.Addresses {
		if a.Addr().Zone() != "" || a.Addr().IsUnspecified() || a.Addr().IsMulticast() {
			return fmt.Errorf("[Interface] Address %v: not an address this endpoint can own", a)
		}
	}
	return nil
}

// checkWGPorts refuses, before anything starts, a host port this user
// may not bind (below net.ipv4.ip_unprivileged_port_start without root):
// the relay, in a user namespace of its own, could not either.
func checkWGPorts(c *wgconf.Config, s *wgSpec) error {
	start := sandbox.UnprivilegedPortStart()
	check := func(what string, port uint16) error {
		if port != 0 && int(port) < start {
			return fmt.Errorf("%s: binding host port %d needs CAP_NET_BIND_SERVICE (ports below %d, sysctl net.ipv4.ip_unprivileged_port_start): use a port from %d up, run as root, or lower the sysctl", what, port, start, start)
		}
		return nil
	}
	if err := check("[Interface] ListenPort", c.Interface.ListenPort); err != nil {
		return err
	}
	for _, l := range []struct {
		flag string
		fs   []sandbox.HostForward
	}{{"-p", s.Forwards}, {"-L", s.Locals}} {
		for _, f := range l.fs {
			if err := check(l.flag+" "+f.String(), f.Host.Port()); err != nil {
				return err
			}
		}
	}
	// Each listener's address once: a second would fail at start.
	type listener struct {
		udp  bool
		addr netip.AddrPort
	}
	seen := map[listener]string{}
	taken := func(what string, l listener) error {
		if l.addr.Port() == 0 {
			return nil
		}
		if first, ok := seen[l]; ok {
			return fmt.Errorf("%s: %v is taken by %s already", what, l.addr, first)
		}
		seen[l] = what
		return nil
	}
	for _, l := range []struct {
		flag string
		fs   []sandbox.HostForward
	}{{"-p", s.Forwards}, {"-L", s.Locals}} {
		for _, f := range l.fs {
			if err := taken(l.flag+" "+f.String(), listener{f.UDP, f.Host}); err != nil {
				return err
			}
		}
	}
	for _, l := range []struct{ flag, v string }{{"-socks", s.SOCKS}, {"-http", s.HTTP}, {"-metrics", s.Metrics}} {
		if ap, err := netip.ParseAddrPort(l.v); err == nil {
			if err := check(l.flag, ap.Port()); err != nil {
				return err
			}
			if err := taken(l.flag, listener{false, ap}); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseUpstream reads a resolver's address, ADDR or ADDR:PORT (53 by
// default), as ustack tun's -dns-upstream does.
func parseUpstream(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, 53), nil
}

// readProxyAuth reads a -proxy-auth file: USER:PASSWORD on its first
// line, each 1 to 255 bytes (RFC 1929's limits). Errors never quote the
// password.
func readProxyAuth(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	user, pass, ok := strings.Cut(line, ":")
	if !ok || len(user) == 0 || len(user) > 255 || len(pass) == 0 || len(pass) > 255 {
		return "", fmt.Errorf("%s: want USER:PASSWORD on the first line, each 1 to 255 bytes", path)
	}
	return line, nil
}

// parseWGForward reads -p's [HOSTIP:]HOSTPORT:PEERADDR:PORT[/udp] or,
// with names, -L's [HOST:]PORT:DEST:PORT[/udp]: IPv6 addresses in
// brackets, the host address 127.0.0.1 by default (exposing a peer's
// service to the network takes an explicit 0.0.0.0 or [::]). -L's DEST
// may be a name, resolved when a connection comes; -p's PEERADDR is an
// address.
func parseWGForward(s string, names bool) (sandbox.HostForward, error) {
	var f sandbox.HostForward
	spec := s
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		switch strings.ToLower(spec[i+1:]) {
		case "udp":
			f.UDP = true
		case "tcp":
		default:
			return f, fmt.Errorf("protocol %q: use tcp or udp", spec[i+1:])
		}
		spec = spec[:i]
	}
	form := "[HOSTIP:]HOSTPORT:PEERADDR:PORT[/udp]"
	if names {
		form = "[HOST:]PORT:DEST:PORT[/udp]"
	}
	parts, ok := splitColons(spec)
	if !ok || len(parts) < 3 || len(parts) > 4 {
		return f, fmt.Errorf("want %s, IPv6 addresses in brackets", form)
	}
	host := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if len(parts) == 4 {
		a, err := netip.ParseAddr(parts[0])
		if err != nil || a.Zone() != "" {
			return f, fmt.Errorf("host address %q: not an IP address", parts[0])
		}
		host, parts = a.Unmap(), parts[1:]
	}
	hp, err := strconv.ParseUint(parts[0], 10, 16)
	if err != nil {
		return f, fmt.Errorf("host port %q: not a port (0 to 65535; 0 picks one)", parts[0])
	}
	port, err := strconv.ParseUint(parts[2], 10, 16)
	if err != nil || port == 0 {
		return f, fmt.Errorf("port %q: not a port (1 to 65535)", parts[2])
	}
	dest := parts[1]
	if a, err := netip.ParseAddr(dest); err == nil && a.Zone() == "" {
		dest = a.Unmap().String()
	} else if !names {
		return f, fmt.Errorf("peer address %q: not an IP address", dest)
	} else if !wgconf.IsHostName(dest) {
		return f, fmt.Errorf("destination %q: neither an IP address nor a host name", dest)
	}
	f.Host = netip.AddrPortFrom(host, uint16(hp))
	f.To = net.JoinHostPort(dest, strconv.FormatUint(port, 10))
	return f, nil
}

// splitColons splits s at the colons outside brackets, removing the
// brackets: "[::1]:80:h:81" is "::1", "80", "h", "81". It reports false
// for unbalanced brackets or text beside a bracketed part.
func splitColons(s string) ([]string, bool) {
	var parts []string
	for s != "" {
		if s[0] == '[' {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, false
			}
			parts = append(parts, s[1:end])
			s = s[end+1:]
			if s == "" {
				break
			}
			if s[0] != ':' {
				return nil, false
			}
			s = s[1:]
			if s == "" {
				parts = append(parts, "")
			}
			continue
		}
		part, rest, more := strings.Cut(s, ":")
		if strings.ContainsAny(part, "[]") {
			return nil, false
		}
		parts = append(parts, part)
		s = rest
		if more && s == "" {
			parts = append(parts, "")
		}
	}
	return parts, true
}

// run serves until a signal (or, confined, until the relay fails) and
// returns the exit status: 0 once told to stop, 1 if serving failed.
// Confined (the default), a relay process of its own serves (startRelay);
// unconfined, this process does.
func (r *wgRun) run(stderr io.Writer) int {
	name := r.spec.Name
	for _, w := range r.warnings {
		fmt.Fprintf(stderr, "%s: %s\n", name, w)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if !r.confine {
		if r.procs > 0 {
			runtime.GOMAXPROCS(r.procs)
		}
		s, err := startWG(&r.spec, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		<-sigs
		s.close()
		return 0
	}
	p, err := startRelay(name, "wg", r.spec, nil, relayOptions{stderr: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer func() {
		p.stop()
		removeRelaySocket(r.spec.API)
	}()
	select {
	case <-sigs:
		return 0
	case <-p.failed():
		fmt.Fprintf(stderr, "%s: %v\n", name, p.err())
		return 1
	}
}
