//go:build !race

package tun

// raceEnabled: the race detector is off.
const raceEnabled = false
