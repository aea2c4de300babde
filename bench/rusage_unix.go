//go:build unix

package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// rusage returns the process's CPU time (user and system, every thread)
// and its voluntary and involuntary context switches.
func rusage() (time.Duration, int64, int64) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu, int64(ru.Nvcsw), int64(ru.Nivcsw)
}
