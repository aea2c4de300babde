//go:build race

package afpacket

// raceEnabled: the race detector is on; allocation counts do not hold.
const raceEnabled = true
