// Package netns builds the network namespaces that ustack's privileged
// tests and the veth and tun benchmarks run in: named namespaces, veth
// pairs between them, addresses and routes, all through netlink, and a way
// to run code (open sockets, create TUN devices) inside a namespace while
// the rest of the process stays where it is.
//
// Everything here needs Linux, CAP_NET_ADMIN and CAP_SYS_ADMIN; Probe says
// whether this process has them, by trying, and NoPrivilege tells its
// error for a missing privilege from one for a broken environment.
package netns
