//go:build race

package pktio_test

// raceEnabled: the race detector is on; allocation counts do not hold.
const raceEnabled = true
