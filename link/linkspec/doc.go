// Package linkspec opens a link endpoint from a spec, the one way every
// command names a link: "afpacket:IFACE" binds to an existing interface,
// "tun:NAME" opens or creates a TUN device, and "mem" is an in-memory NIC
// pair for two stacks in one process. Faults (link.Impairments) are
// injected by wrapping the opened endpoint with package impair.
//
// Parse checks a spec without opening anything, so a command can refuse a
// bad flag before it acquires privileges or devices; Open and OpenPair
// open what a parsed spec names.
package linkspec
