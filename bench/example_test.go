package bench_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ustack-dev/ustack/bench"
	"github.com/ustack-dev/ustack/sched"
)

// A plan is every combination of its tests, qdiscs and sender counts;
// RunPlan runs each on fresh hosts and returns one row per combination.
// This one is tiny (two cells, each run once, a 20 ms window) so that the
// example is quick; its rates mean nothing, so only the rows are shown.
func ExampleRunPlan() {
	plan := bench.Plan{
		Tests:    []string{bench.TCPRR},
		Links:    []string{"mem"}, // in-process, no privilege needed
		Qdiscs:   []string{sched.None, sched.LList},
		Senders:  []int{1},
		Duration: 20 * time.Millisecond,
		Count:    1, // no repeats: a real run keeps AutoCount for a median
	}
	// Validate refuses a bad plan before anything runs.
	if err := plan.Validate(); err != nil {
		log.Fatal(err)
	}
	results, err := bench.RunPlan(context.Background(), plan, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(results), "rows")
	// Rows come in the order of plan.Cells. A command writes them with
	// WriteTable, WriteCSV or WriteJSON and compares qdiscs as ratios
	// (bench.Ratio), never as absolute speeds.
	for _, r := range results {
		fmt.Println(r.Test, r.Link, r.Qdisc, r.Senders)
	}
	// Output:
	// 2 rows
	// tcp_rr mem none 1
	// tcp_rr mem llist 1
}
