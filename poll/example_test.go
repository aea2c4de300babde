package poll_test

import (
	"fmt"

	"github.com/ustack-dev/ustack/poll"
)

// A command takes a busy-polling mode as a flag and hands the parsed Mode
// to stack.Options.BusyPoll; the stack then owns the Poller. Parse is
// where a bad flag is refused, before any stack exists.
func ExampleParse() {
	for _, flag := range []string{"off", "on", "spin:20", "adaptive:200", "on:5000"} {
		m, err := poll.Parse(flag)
		if err != nil {
			fmt.Println("refused:", err)
			continue
		}
		// The Kind says what a reader with an empty socket does; the
		// Budget how long one wait may spin (adaptive's ceiling).
		switch m.Kind {
		case poll.Off:
			fmt.Printf("%s: park at once\n", m)
		case poll.On:
			fmt.Printf("%s: poll up to %v, yield to runnable goroutines\n", m, m.Budget)
		case poll.Spin:
			fmt.Printf("%s: poll up to %v whatever else wants to run\n", m, m.Budget)
		case poll.Adaptive:
			fmt.Printf("%s: poll up to %v while polling finds data\n", m, m.Budget)
		}
	}
	// Output:
	// off: park at once
	// on:50: poll up to 50µs, yield to runnable goroutines
	// spin:20: poll up to 20µs whatever else wants to run
	// adaptive:200: poll up to 200µs while polling finds data
	// refused: busy poll budget 5ms: must be above 0 and at most 1ms
}
