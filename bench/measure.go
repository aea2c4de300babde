package bench

import (
	"math/bits"
	"runtime/metrics"
	"time"
)

// usage is what the process has consumed up to a moment.
type usage struct {
	at            time.Time
	cpu           time.Duration // user + system, all threads
	vcsw, ivcsw   int64
	allocs, bytes uint64
}

var allocMetrics = []string{"/gc/heap/allocs:objects", "/gc/heap/allocs:bytes"}

func readUsage() usage {
	u := usage{at: time.Now()}
	u.cpu, u.vcsw, u.ivcsw = rusage()
	samples := []metrics.Sample{{Name: allocMetrics[0]}, {Name: allocMetrics[1]}}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		u.allocs = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		u.bytes = samples[1].Value.Uint64()
	}
	return u
}

// histogram is a log-linear latency histogram in nanoseconds: 32 linear
// sub-buckets per power of two, so any value is reported within about 3%,
// in a fixed array that never allocates while recording.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	subBits     = 5
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits) * subBuckets
)

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	return shift*subBuckets + int(v>>shift)
}

// bucketMid returns the middle of bucket i's range.
func bucketMid(i int) uint64 {
	if i < 2*subBuckets {
		return uint64(i)
	}
	shift := i/subBuckets - 1
	low := uint64(i-shift*subBuckets) << shift
	return low + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1) in microseconds, or 0 if
// the histogram is empty.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return float64(bucketMid(i)) / 1e3
		}
	}
	return 0
}
