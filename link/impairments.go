package link

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Impairments are the faults package impair injects around any link
// endpoint (ustack's one fault injector). Probabilities are fractions from
// 0 to 1. The random sequence is seeded, so a run with the same traffic
// sees the same faults.
type Impairments struct {
	// Loss drops a packet.
	Loss float64
	// Duplicate delivers a packet twice.
	Duplicate float64
	// Reorder holds a packet back and delivers it after the next one.
	Reorder float64
	// Corrupt flips one bit of a received packet. Over a link that claims
	// RX checksum offload nobody would catch it, so the packet is dropped
	// instead, as a NIC drops a frame whose FCS fails.
	Corrupt float64
	// Delay holds every packet for this long before delivery.
	Delay time.Duration
	// Jitter adds a uniformly random extra delay up to this long. Packets
	// still leave in order: jitter alone never reorders (a packet is held
	// until the one delayed before it has left).
	Jitter time.Duration
	// Seed seeds the fault sequence; the two directions derive different
	// sequences from it.
	Seed uint64
}

// Active reports whether any fault is configured.
func (im Impairments) Active() bool {
	return im.Loss > 0 || im.Duplicate > 0 || im.Reorder > 0 || im.Corrupt > 0 || im.Delay > 0 || im.Jitter > 0
}

// Validate checks that every probability is a fraction and no duration is
// negative.
func (im Impairments) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", im.Loss}, {"dup", im.Duplicate}, {"reorder", im.Reorder}, {"corrupt", im.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("impairment %s=%v: must be a fraction from 0 to 1", p.name, p.v)
		}
	}
	if im.Delay < 0 || im.Jitter < 0 {
		return fmt.Errorf("impairment delay %v, jitter %v: must not be negative", im.Delay, im.Jitter)
	}
	return nil
}

// String formats im as ParseImpairments reads it; "none" when inactive.
func (im Impairments) String() string {
	var parts []string
	pct := func(name string, v float64) {
		if v <= 0 {
			return
		}
		// A percentage where it reads back as exactly v, else the
		// fraction (v*100 can round: 0.95 must not come back as
		// 0.9500000000000001).
		p := strconv.FormatFloat(v*100, 'g', -1, 64)
		if f, err := strconv.ParseFloat(p, 64); err == nil && f/100 == v {
			parts = append(parts, name+"="+p+"%")
		} else {
			parts = append(parts, name+"="+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	pct("loss", im.Loss)
	pct("dup", im.Duplicate)
	pct("reorder", im.Reorder)
	pct("corrupt", im.Corrupt)
	if im.Delay > 0 {
		parts = append(parts, "delay="+im.Delay.String())
	}
	if im.Jitter > 0 {
		parts = append(parts, "jitter="+im.Jitter.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	if im.Seed != 0 {
		parts = append(parts, "seed="+strconv.FormatUint(im.Seed, 10))
	}
	return strings.Join(parts, ",")
}

// ParseImpairments reads a comma-separated list of KEY=VALUE: loss, dup,
// reorder and corrupt take a percentage ("5%") or a fraction ("0.05");
// delay and jitter take Go durations; seed takes an unsigned integer.
// "" and "none" mean no impairment.
func ParseImpairments(s string) (Impairments, error) {
	var im Impairments
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return im, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Impairments{}, fmt.Errorf("impairment %q: want KEY=VALUE with KEY one of loss, dup, reorder, corrupt, delay, jitter, seed", kv)
		}
		var err error
		switch k {
		case "loss":
			im.Loss, err = parseFraction(v)
		case "dup", "duplicate":
			im.Duplicate, err = parseFraction(v)
		case "reorder":
			im.Reorder, err = parseFraction(v)
		case "corrupt":
			im.Corrupt, err = parseFraction(v)
		case "delay":
			im.Delay, err = time.ParseDuration(v)
		case "jitter":
			im.Jitter, err = time.ParseDuration(v)
		case "seed":
			im.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return Impairments{}, fmt.Errorf("impairment %q: unknown key %q: valid keys are loss, dup, reorder, corrupt, delay, jitter, seed", kv, k)
		}
		if err != nil {
			return Impairments{}, fmt.Errorf("impairment %q: %w", kv, err)
		}
	}
	if err := im.Validate(); err != nil {
		return Impairments{}, err
	}
	return im, nil
}

func parseFraction(v string) (float64, error) {
	percent := false
	if t, ok := strings.CutSuffix(v, "%"); ok {
		v, percent = t, true
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a percentage or fraction", v)
	}
	if percent {
		// Divided, not multiplied by 0.01 (itself inexact): 95% is then
		// the float64 nearest 0.95, as ".95" is.
		f /= 100
	}
	if !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("%q: must be from 0%% to 100%%", v)
	}
	return f, nil
}
