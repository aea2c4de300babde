// Package upstream dials through the proxies that `ustack tun -proxy`
// relays flows to: SOCKS5 (golang.org/x/net/proxy's client) and HTTP
// CONNECT (ours), both named by a URL and both returned as an
// x/net/proxy ContextDialer, the shape forward.Relay and http.Transport
// take. A conn through either has CloseWrite when the conn to the proxy
// has it, so a relay can pass a half-close on.
package upstream
