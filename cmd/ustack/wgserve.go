package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/sandbox"
	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// wgServer is a serving WireGuard endpoint: wireguard-go on its UDP
// sockets, the wgnet stack behind it, and what the spec asked for on
// top: the relay, forwards, proxies, metrics and the API.
type wgServer struct {
	spec   *wgSpec
	stderr io.Writer
	dev    *device.Device
	tnet   *wgnet.Net
	fw     *forward.Forwarder     // the relay; nil without it
	pf     *sandbox.PortForwarder // -p, through the relay; nil without it
	lf     *sandbox.PortForwarder // -L, through the tunnel
	socks  *socksServer
	http   *httpProxy
	prom   *metrics.Server
	// stopProfiles stops the CPU profile and trace (startProfiles).
	stopProfiles func()
}

// startWG opens everything s asks for, in this process: the device and
// its UDP sockets, the stack, the relay, the listeners, the metrics and
// the API socket; what it returns serves until close. What it cannot
// open is an error, with everything opened so far closed.
func startWG(s *wgSpec, stderr io.Writer) (_ *wgServer, err error) {
	conf, err := wgconf.Parse(s.Config)
	if err != nil {
		return nil, err
	}
	w := &wgServer{spec: s, stderr: stderr}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.stopProfiles, err = startProfiles(s.Profiles[0], s.Profiles[1]); err != nil {
		return nil, err
	}
	t := newWGTunnel(conf)
	if w.dev, w.tnet, err = openWGDevice(conf, s.Relay, wgLogger(stderr, s.Name, s.Verbose)); err != nil {
		return nil, err
	}
	mtu := wgMTU(conf)
	tnet := w.tnet
	var notes []string
	port, _ := wgDeviceState(w.dev)
	notes = append(notes, fmt.Sprintf("listening on UDP port %d for %d peers, tunnel address %s, MTU %d", port, len(conf.Peers), joinStrings(conf.Interface.Addresses), mtu))

	d := &tunnelDialer{net: tnet}
	if s.Relay {
		pol := t.policy(s)
		if w.fw, err = forward.New(tnet.Stack(), forward.Relay(&net.Dialer{}, pol), &forward.Options{
			MaxFlows: s.MaxFlows, MaxTCP: s.MaxTCP, MaxUDP: s.MaxUDP, MaxHalfOpen: s.MaxHalfOpen,
			UDPIdleTimeout: s.UDPIdleTimeout,
		}); err != nil {
			return nil, err
		}
		notes = append(notes, exitNote(pol))
		notes = append(notes, pingNote(w.fw))
		if w.pf, err = sandbox.NewPortForwarder(&sandbox.PortForwarderOptions{Forwarder: w.fw, ConnectTimeout: s.ConnectTimeout, UDPIdleTimeout: s.UDPIdleTimeout}); err != nil {
			return nil, err
		}
		for _, f := range s.Forwards {
			at, err := w.pf.Listen(f)
			if err != nil {
				return nil, fmt.Errorf("-p %v: %w", f, err)
			}
			notes = append(notes, fmt.Sprintf("forwarding %s to %s", protoAddr(f.UDP, at), f.To))
		}
		// The client side resolves names as the DNS service does.
		d.lookup = hostLookup(s.DNSUpstream[0])
	}
	if w.lf, err = sandbox.NewPortForwarder(&sandbox.PortForwarderOptions{Dial: d.DialContext, ConnectTimeout: s.ConnectTimeout, UDPIdleTimeout: s.UDPIdleTimeout}); err != nil {
		return nil, err
	}
	for _, f := range s.Locals {
		at, err := w.lf.Listen(f)
		if err != nil {
			return nil, fmt.Errorf("-L %v: %w", f, err)
		}
		notes = append(notes, fmt.Sprintf("forwarding %s into the tunnel to %s", protoAddr(f.UDP, at), f.To))
	}
	if s.SOCKS != "" {
		ln, err := net.Listen("tcp", s.SOCKS)
		if err != nil {
			return nil, fmt.Errorf("-socks: %w", err)
		}
		w.socks = newSOCKSServer(ln, d, s.Auth, s.ConnectTimeout)
		notes = append(notes, fmt.Sprintf("SOCKS5 proxy into the tunnel at %s%s", ln.Addr(), authNote(s.Auth)))
	}
	if s.HTTP != "" {
		ln, err := net.Listen("tcp", s.HTTP)
		if err != nil {
			return nil, fmt.Errorf("-http: %w", err)
		}
		w.http = newHTTPProxy(ln, d, s.Auth, s.ConnectTimeout)
		notes = append(notes, fmt.Sprintf("HTTP proxy into the tunnel at %s%s", ln.Addr(), authNote(s.Auth)))
	}
	if s.Metrics != "" {
		if w.prom, err = metrics.Serve(s.Metrics, metrics.NewFunc(sandbox.StatsMetrics(w.stats)), metrics.NewStack(tnet.Stack())); err != nil {
			return nil, err
		}
		notes = append(notes, fmt.Sprintf("Prometheus metrics at http://%s/metrics", w.prom.Addr()))
	}
	if s.API != "" {
		// API forwards go as -p's do, through the relay, or as -L's
		// without it.
		pf := w.pf
		if pf == nil {
			pf = w.lf
		}
		if err := pf.ServeAPI(s.API, wgHostfwdAPI(t)); err != nil {
			return nil, fmt.Errorf("API socket: %w", err)
		}
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "%s: %s\n", s.Name, n)
	}
	return w, nil
}

// openWGDevice starts wireguard-go on conf, whose endpoint names must be
// resolved already: its UDP sockets (ListenPort), and a wgnet stack with
// the [Interface] addresses behind it, transparent for an exit node
// (exit), else resolving names through the [Interface] DNS servers. The
// caller closes the device, which closes the stack.
func openWGDevice(conf *wgconf.Config, exit bool, log *device.Logger) (*device.Device, *wgnet.Net, error) {
	var dns []netip.Addr
	if !exit {
		// A client resolves through the tunnel's DNS servers; an exit
		// node's DNS addresses are its own service (Policy.DNS).
		dns = conf.Interface.DNS
	}
	tdev, tnet, err := wgnet.CreateNetTUNWithOptions(newWGTunnel(conf).addrs, dns, wgMTU(conf), &wgnet.Options{Transparent: exit})
	if err != nil {
		return nil, nil, err
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), log)
	fail := func(err error) (*device.Device, *wgnet.Net, error) {
		dev.Close()
		return nil, nil, err
	}
	uapi, err := conf.UAPI(nil)
	if err != nil {
		return fail(err)
	}
	if err := dev.IpcSet(uapi); err != nil {
		return fail(fmt.Errorf("configure wireguard-go: %w", err))
	}
	if err := dev.Up(); err != nil {
		return fail(fmt.Errorf("open the WireGuard UDP sockets on port %d: %w", conf.Interface.ListenPort, err))
	}
	return dev, tnet, nil
}

// wgMTU is the tunnel's MTU: the file's, or wireguard-go's default.
func wgMTU(conf *wgconf.Config) int {
	if conf.Interface.MTU != 0 {
		return conf.Interface.MTU
	}
	return defaultWGMTU
}

// confine opens the ping relay's sockets, then confines this process
// (sandbox.ConfineProcess): wireguard-go's sockets are open by now, and
// what it does on them (sendmmsg, recvmmsg, UDP GSO and GRO in control
// messages, its netlink route socket) is in the allow-list.
func (w *wgServer) confine() error {
	if w.fw != nil {
		w.fw.OpenPing()
	}
	return sandbox.ConfineProcess()
}

// close stops everything, the device last (it closes the stack), and
// writes the counters if asked. Idempotent.
func (w *wgServer) close() {
	// Both idempotent; their counters stay readable for writeStats.
	if w.socks != nil {
		w.socks.Close()
	}
	if w.http != nil {
		w.http.Close()
	}
	if w.prom != nil {
		w.prom.Close()
		w.prom = nil
	}
	if w.fw != nil {
		w.fw.Close() // aborts every relayed flow, -p's too
	}
	for _, pf := range []*sandbox.PortForwarder{w.pf, w.lf} {
		if pf != nil {
			pf.Close()
		}
	}
	if w.dev != nil {
		if w.spec.Stats {
			w.writeStats()
		}
		w.dev.Close() // closes the TUN and the stack behind it
		w.dev = nil
	}
	if w.stopProfiles != nil {
		w.stopProfiles()
		w.stopProfiles = nil
	}
}

// stats are the relay's and the forwards' counters, as a sandbox's.
func (w *wgServer) stats() sandbox.Stats {
	var st sandbox.Stats
	if w.fw != nil {
		st.Stats = w.fw.Stats()
	}
	for _, pf := range []*sandbox.PortForwarder{w.pf, w.lf} {
		c, f := pf.Counts()
		st.PortForwardConns += c
		st.PortForwardFailed += f
	}
	return st
}

// writeStats prints the counters: the relay's as ustack tun does, the
// proxies', and each peer's.
func (w *wgServer) writeStats() {
	name := w.spec.Name
	writeTunStats(w.stderr, name, w.stats())
	if w.socks != nil {
		fmt.Fprintf(w.stderr, "%s: socks5 connects %d (failed %d), udp associations %d\n", name, w.socks.conns.Load(), w.socks.failed.Load(), w.socks.assocs.Load())
	}
	if w.http != nil {
		fmt.Fprintf(w.stderr, "%s: http proxy connections %d (failed %d)\n", name, w.http.conns.Load(), w.http.failed.Load())
	}
	writeWGPeers(w.stderr, name, w.dev)
}

// writeWGPeers prints each peer's counters (none for a nil device).
func writeWGPeers(stderr io.Writer, name string, dev *device.Device) {
	if dev == nil {
		return
	}
	_, peers := wgDeviceState(dev)
	for _, p := range peers {
		hs := "never"
		if !p.handshake.IsZero() {
			hs = time.Since(p.handshake).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(stderr, "%s: peer %s: endpoint %s, bytes received %d sent %d, last handshake %s\n", name, p.key, p.endpoint, p.rx, p.tx, hs)
	}
}

// peerState is a peer as wireguard-go reports it.
type peerState struct {
	key       wgconf.Key
	endpoint  string
	rx, tx    uint64
	handshake time.Time
}

// wgDeviceState reads the device's listen port and peers from its
// configuration (IpcGet), which holds the private key: only the fields
// named here are read from it, and nothing else of it leaves.
func wgDeviceState(dev *device.Device) (port uint16, peers []peerState) {
	get, err := dev.IpcGet()
	if err != nil {
		return 0, nil
	}
	sc := bufio.NewScanner(strings.NewReader(get))
	var p *peerState
	var sec int64
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "listen_port":
			n, _ := strconv.ParseUint(v, 10, 16)
			port = uint16(n)
		case "public_key":
			peers = append(peers, peerState{})
			p = &peers[len(peers)-1]
			if b, err := hex.DecodeString(v); err == nil && len(b) == wgconf.KeyLen {
				p.key = wgconf.Key(b)
			}
		case "endpoint":
			if p != nil {
				p.endpoint = v
			}
		case "rx_bytes":
			if p != nil {
				p.rx, _ = strconv.ParseUint(v, 10, 64)
			}
		case "tx_bytes":
			if p != nil {
				p.tx, _ = strconv.ParseUint(v, 10, 64)
			}
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			if nsec, _ := strconv.ParseInt(v, 10, 64); p != nil && (sec != 0 || nsec != 0) {
				p.handshake = time.Unix(sec, nsec)
			}
		}
	}
	for i := range peers {
		if peers[i].endpoint == "" {
			peers[i].endpoint = "(none yet)"
		}
	}
	return port, peers
}

// wgLogger is wireguard-go's log on stderr, its errors always and its
// events with verbose. wireguard-go names peers by a shortened public
// key and never logs a private or preshared key.
func wgLogger(stderr io.Writer, name string, verbose bool) *device.Logger {
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s: wireguard: %s\n", name, fmt.Sprintf(format, args...))
	}
	l := &device.Logger{Verbosef: device.DiscardLogf, Errorf: logf}
	if verbose {
		l.Verbosef = logf
	}
	return l
}

// exitNote says at start what the exit node relays.
func exitNote(p *forward.Policy) string {
	var b strings.Builder
	b.WriteString("exit node: the peers' flows are relayed from host sockets")
	if len(p.HostLoopback) > 0 {
		if p.AllowHostLoopback {
			fmt.Fprintf(&b, "; the host's loopback at %s", joinStrings(p.HostLoopback))
		} else {
			b.WriteString("; the host's loopback refused (-allow-host-loopback)")
		}
	}
	for _, d := range p.DNS {
		if d.Upstream.IsValid() {
			fmt.Fprintf(&b, "; DNS at %v through %v", d.Addr, d.Upstream)
		} else {
			fmt.Fprintf(&b, "; DNS at %v refused (no resolver: -dns-upstream)", d.Addr)
		}
	}
	return b.String()
}

// pingNote says at start whether pings can be relayed (it opens the ping
// relay's sockets: Forwarder.OpenPing), or why they are refused and
// counted.
func pingNote(fw *forward.Forwarder) string {
	if err := fw.OpenPing(); err != nil {
		return "pings to relayed destinations are refused, and counted: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return "pings are relayed"
}

// authNote says whether a proxy asks for credentials.
func authNote(auth string) string {
	if auth == "" {
		return ""
	}
	return " (with a user and password, -proxy-auth)"
}

// protoAddr is a listener's address with its protocol, for messages.
func protoAddr(udp bool, a netip.AddrPort) string {
	if udp {
		return "udp " + a.String()
	}
	return "tcp " + a.String()
}

func joinStrings[T fmt.Stringer](v []T) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

// wgHostfwdAPI is ustack wg's side of slirp4netns's API: a forward goes
// to the guest_addr it names, which must be a peer's (some peer's
// AllowedIPs cover it).
func wgHostfwdAPI(t *wgTunnel) sandbox.HostfwdAPI {
	return sandbox.HostfwdAPI{
		Forward: func(r sandbox.HostfwdRequest) (sandbox.HostForward, error) {
			f := sandbox.HostForward{UDP: r.UDP, Host: r.Host}
			if !r.Guest.IsValid() {
				return f, errors.New("bad arguments.guest_addr: required: the address of the peer to forward to")
			}
			f.To = netip.AddrPortFrom(r.Guest, r.GuestPort).String()
			if err := t.routed(f.To); err != nil {
				return f, fmt.Errorf("bad arguments.guest_addr %v: %w", r.Guest, err)
			}
			return f, nil
		},
		Entry: func(info sandbox.HostForwardInfo, e sandbox.HostfwdEntry) sandbox.HostfwdEntry {
			host := info.Host.Addr()
			if host.Is4() || host.IsUnspecified() {
				e.HostAddr = host.String()
			}
			if host.Is6() || host.IsUnspecified() {
				e.HostAddr6 = host.String()
				if host.IsUnspecified() {
					e.HostAddr6 = netip.IPv6Unspecified().String()
				}
			}
			if to, err := netip.ParseAddrPort(info.To); err == nil && to.Addr().Is6() {
				e.GuestAddr6 = to.Addr().String()
			} else if err == nil {
				e.GuestAddr = to.Addr().String()
			}
			return e
		},
	}
}

// wgRelay is ustack wg's relay process (a kind of relays): it serves
// the spec, confines itself once everything is open, and serves until
// stopped.
func wgRelay(js []byte, fds []int, ready func(func() error) error, stop <-chan struct{}) error {
	for _, fd := range fds {
		syscall.Close(fd) // it is handed none
	}
	var s wgSpec
	if err := json.Unmarshal(js, &s); err != nil {
		return fmt.Errorf("relay: its spec: %w", err)
	}
	if s.Procs > 0 {
		runtime.GOMAXPROCS(s.Procs)
	}
	w, err := startWG(&s, os.Stderr)
	if err != nil {
		return err
	}
	defer w.close()
	if err := ready(w.confine); err != nil {
		return err
	}
	<-stop
	return nil
}
