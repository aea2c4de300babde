//go:build !unix

package bench

import "time"

// rusage is not available here; CPU and context-switch fields read 0.
func rusage() (time.Duration, int64, int64) { return 0, 0, 0 }
