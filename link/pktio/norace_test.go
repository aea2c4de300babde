//go:build !race

package pktio_test

// raceEnabled: the race detector is off.
const raceEnabled = false
