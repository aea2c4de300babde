package family_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/metrics/family"
)

// jobs is a library package's state: it counts without importing any
// exporter.
type jobs struct {
	done   [2]atomic.Uint64 // by outcome: ok, failed
	active atomic.Int64
}

var (
	doneFamily   = &family.Family{Name: "example_jobs_total", Help: "Jobs finished, by outcome.", Labels: []string{"outcome"}}
	activeFamily = &family.Family{Name: "example_jobs_active", Help: "Jobs running now.", Gauge: true}
)

// Metrics describes the counters and reports their values on each export:
// what sandbox.Sandbox.Metrics does for the sandbox's relay.
func (j *jobs) Metrics() family.Source {
	return family.Source{
		Families: []*family.Family{doneFamily, activeFamily},
		Collect: func(emit family.Emit) {
			emit(doneFamily, float64(j.done[0].Load()), "ok")
			emit(doneFamily, float64(j.done[1].Load()), "failed")
			emit(activeFamily, float64(j.active.Load()))
		},
	}
}

// The library describes its counters with a family.Source; only the
// command, which already links Prometheus, turns it into a collector with
// metrics.NewFunc and serves it.
func Example() {
	var j jobs
	j.done[0].Add(3)
	j.done[1].Add(1)
	j.active.Store(2)

	srv, err := metrics.Serve("127.0.0.1:0", metrics.NewFunc(j.Metrics()))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "example_jobs_") {
			fmt.Println(sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// example_jobs_active 2
	// example_jobs_total{outcome="failed"} 1
	// example_jobs_total{outcome="ok"} 3
}
