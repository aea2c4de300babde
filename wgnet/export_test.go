package wgnet

import "time"

// SetDNSTimeout sets how long n waits for one server's answer, so that a
// test of a server that does not answer takes less than dnsTimeout.
func SetDNSTimeout(n *Net, d time.Duration) { n.dnsTimeout = d }
