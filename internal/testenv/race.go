//go:build race

package testenv

// RaceEnabled reports that this binary was built with the race detector
// (-race).
const RaceEnabled = true
