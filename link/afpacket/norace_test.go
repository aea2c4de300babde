//go:build !race

package afpacket

// raceEnabled: the race detector is off.
const raceEnabled = false
