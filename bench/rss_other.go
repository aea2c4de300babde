//go:build !linux

package bench

// resetPeakRSS reports false: only Linux can reset the peak.
func resetPeakRSS() bool { return false }

// peakRSSMiB returns 0 where the peak cannot be reset per cell.
func peakRSSMiB() float64 { return 0 }
