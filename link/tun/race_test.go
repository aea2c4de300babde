//go:build race

package tun

// raceEnabled: the race detector is on; allocation counts do not hold.
const raceEnabled = true
