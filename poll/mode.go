package poll

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind is how a reader busy polls.
type Kind uint8

const (
	// Off parks a reader as soon as its socket is empty.
	Off Kind = iota
	// On polls for up to Mode.Budget, and stops early when other
	// goroutines are runnable.
	On
	// Spin polls for up to Mode.Budget whatever else wants to run. It
	// exists to show, side by side with On, what the runnable check
	// prevents; it is not meant for production.
	Spin
	// Adaptive is On with a budget that follows the hit rate: it starts
	// at Mode.Budget, stays up while polling finds data and shrinks to
	// zero while it does not; at zero, one wait in 64 probes with the
	// whole Mode.Budget.
	Adaptive
)

// Budget limits, in the spirit of Linux's net.core.busy_read (commonly
// 50 us): a spin much longer than a round trip only burns CPU, and one
// shorter than a receive round cannot find anything.
const (
	// DefaultBudget is the budget of "on" and "spin" without a value and
	// the ceiling of "adaptive": Linux's recommended busy_read.
	DefaultBudget = 50 * time.Microsecond
	// MaxBudget bounds any budget: past a millisecond a reader is better
	// parked and woken.
	MaxBudget = time.Millisecond
	// MinAdaptiveBudget is the least adaptive spins before it gives up
	// to zero: about two receive rounds.
	MinAdaptiveBudget = 5 * time.Microsecond
)

// Mode is a busy polling setting. The zero Mode is Off.
type Mode struct {
	Kind Kind
	// Budget is how long one wait may poll (On, Spin), or the most it may
	// grow to (Adaptive).
	Budget time.Duration
}

// String returns the mode in the syntax Parse reads.
func (m Mode) String() string {
	us := strconv.FormatInt(m.Budget.Microseconds(), 10)
	switch m.Kind {
	case On:
		return "on:" + us
	case Spin:
		return "spin:" + us
	case Adaptive:
		if m.Budget == DefaultBudget {
			return "adaptive"
		}
		return "adaptive:" + us
	}
	return "off"
}

// Parse reads a mode: off, on[:US], spin[:US] or adaptive[:US], US being
// the budget (the ceiling for adaptive) in microseconds, 50 by default.
func Parse(s string) (Mode, error) {
	name, us, hasUS := strings.Cut(strings.TrimSpace(s), ":")
	var m Mode
	switch name {
	case "off":
		if hasUS {
			return Mode{}, fmt.Errorf("busy poll mode %q: off takes no budget", s)
		}
		return Mode{}, nil
	case "on":
		m.Kind = On
	case "spin":
		m.Kind = Spin
	case "adaptive":
		m.Kind = Adaptive
	default:
		return Mode{}, fmt.Errorf("busy poll mode %q: valid modes are off, on:<us>, spin:<us>, adaptive[:<us>]", s)
	}
	m.Budget = DefaultBudget
	if hasUS {
		n, err := strconv.ParseUint(us, 10, 32)
		if err != nil || n == 0 {
			return Mode{}, fmt.Errorf("busy poll mode %q: the budget is a positive whole number of microseconds", s)
		}
		m.Budget = time.Duration(n) * time.Microsecond
	}
	if err := m.Check(); err != nil {
		return Mode{}, err
	}
	return m, nil
}

// Check reports whether m is usable.
func (m Mode) Check() error {
	switch {
	case m.Kind > Adaptive:
		return fmt.Errorf("busy poll mode kind %d: unknown", m.Kind)
	case m.Kind == Off:
		return nil
	case m.Budget <= 0 || m.Budget > MaxBudget:
		return fmt.Errorf("busy poll budget %v: must be above 0 and at most %v", m.Budget, MaxBudget)
	case m.Kind == Adaptive && m.Budget < MinAdaptiveBudget:
		return fmt.Errorf("busy poll budget %v: adaptive needs at least %v", m.Budget, MinAdaptiveBudget)
	}
	return nil
}
