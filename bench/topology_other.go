//go:build !linux

package bench

import "fmt"

// deviceTopology needs Linux network namespaces.
func deviceTopology(c Config) (*topology, error) {
	return nil, fmt.Errorf("link %q needs Linux network namespaces", c.Link)
}
