package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
)

// Rate returns a result's headline rate: transactions per second for the
// rr tests, received packets per second otherwise.
func (r Result) Rate() float64 {
	if r.Test == TCPRR || r.Test == UDPRR {
		return r.TPS
	}
	return r.RecvPPS
}

// Ratio returns each result's headline rate divided by that of the first
// result (in order) with the same test, link, senders and size: in a run
// whose first qdisc is a baseline, how each qdisc compares with it. The
// WireGuard links count as one link, so that in a run with wg-netstack
// before wg (as Links and -link all order them) each wg row is compared
// with wireguard-go's netstack. It is NaN where the baseline's rate is 0.
func Ratio(rs []Result) []float64 {
	type key struct {
		test, link    string
		senders, size int
	}
	base := map[key]float64{}
	out := make([]float64, len(rs))
	for i, r := range rs {
		l := r.Link
		if isWG(l) {
			l = LinkWG
		}
		k := key{r.Test, l, r.Senders, r.Size}
		b, ok := base[k]
		if !ok {
			b = r.Rate()
			base[k] = b
		}
		if b == 0 {
			out[i] = math.NaN()
		} else {
			out[i] = r.Rate() / b
		}
	}
	return out
}

// WriteJSON writes {"results":[...]}.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Results []Result `json:"results"`
	}{rs})
}

// csvHeader is the CSV header: the JSON field names, in order.
var csvHeader = []string{"test", "link", "qdisc", "senders", "size", "duration_s", "sent_pps", "recv_pps", "gbps", "tps", "loss_pct", "cpu_ns_per_op", "allocs_per_op", "bytes_per_op", "vcsw", "ivcsw", "p50_us", "p99_us", "p999_us", "busypoll", "cache", "peak_rss_mib"}

// WriteCSV writes a header row and one row per result, with full precision.
func WriteCSV(w io.Writer, rs []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, r := range rs {
		row := []string{r.Test, r.Link, r.Qdisc, strconv.Itoa(r.Senders), strconv.Itoa(r.Size), f(r.DurationS),
			f(r.SentPPS), f(r.RecvPPS), f(r.Gbps), f(r.TPS), f(r.LossPct), f(r.CPUNsPerOp), f(r.AllocsPerOp), f(r.BytesPerOp),
			f(r.VCSW), f(r.IVCSW), f(r.P50us), f(r.P99us), f(r.P999us), r.BusyPoll, r.Cache, f(r.PeakRSSMiB)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes an aligned table, with a last column comparing each
// row's headline rate with the first row's at the same test and senders
// (Ratio).
// A busypoll column appears when any row busy polls, a cache column when
// the rows differ in their cache setting.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	polling := slices.ContainsFunc(rs, func(r Result) bool { return r.BusyPoll != "" && r.BusyPoll != "off" })
	caching := slices.ContainsFunc(rs, func(r Result) bool { return r.Cache == "off" }) &&
		slices.ContainsFunc(rs, func(r Result) bool { return r.Cache == "on" })
	bp := func(r Result) string {
		s := ""
		if polling {
			s += r.BusyPoll + "\t"
		}
		if caching {
			s += r.Cache + "\t"
		}
		return s
	}
	head := "test\tlink\tqdisc\t"
	if polling {
		head += "busypoll\t"
	}
	if caching {
		head += "cache\t"
	}
	fmt.Fprintln(tw, head+"senders\tsize\tsent_pps\trecv_pps\tgbps\ttps\tloss%\tcpu_ns/op\tallocs/op\tB/op\tvcsw\tivcsw\tp50_us\tp99_us\tp999_us\trss_MiB\tvs_first\t")
	ratios := Ratio(rs)
	for i, r := range rs {
		ratio := "-"
		if !math.IsNaN(ratios[i]) {
			ratio = fmt.Sprintf("%.2fx", ratios[i])
		}
		rr := r.Test == TCPRR || r.Test == UDPRR
		lat := func(v float64) string {
			if !rr {
				return "-"
			}
			return fmt.Sprintf("%.1f", v)
		}
		tps := "-"
		if rr {
			tps = si(r.TPS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%d\t%d\t%s\t%s\t%.3f\t%s\t%.2f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%.0f\t%s\t\n",
			r.Test, r.Link, r.Qdisc, bp(r), r.Senders, r.Size, si(r.SentPPS), si(r.RecvPPS), r.Gbps, tps, r.LossPct,
			r.CPUNsPerOp, r.AllocsPerOp, r.BytesPerOp, r.VCSW, r.IVCSW, lat(r.P50us), lat(r.P99us), lat(r.P999us), r.PeakRSSMiB, ratio)
	}
	return tw.Flush()
}

// si formats v with three significant digits and an SI suffix.
func si(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return fmt.Sprintf("%.3gG", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// WriteBusyPoll writes, for every result whose hosts busy polled, what
// their readers did in the window: waits, how they ended, the receive
// rounds they ran and the CPU time they spun.
func WriteBusyPoll(w io.Writer, rs []Result) error {
	if !slices.ContainsFunc(rs, func(r Result) bool { return r.BusyPollStats != nil }) {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "test\tlink\tqdisc\tbusypoll\tsenders\thost\twaits\thits\trunnable_exits\texhausted\tparks\tpolls\tpolls_found\tspin_ms\tspin_ns/op\tbudget_us\t")
	for _, r := range rs {
		if r.BusyPollStats == nil {
			continue
		}
		ops := r.TPS * r.DurationS
		if ops == 0 {
			ops = r.SentPPS * r.DurationS
		}
		for _, side := range []struct {
			name string
			s    *poll.Stats
		}{{"client", r.BusyPollStats.Client}, {"server", r.BusyPollStats.Server}} {
			if side.s == nil {
				continue
			}
			s := side.s
			perOp := "-"
			if ops > 0 {
				perOp = fmt.Sprintf("%.0f", float64(s.SpinTime.Nanoseconds())/ops)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t%.1f\t\n",
				r.Test, r.Link, r.Qdisc, r.BusyPoll, r.Senders, side.name, s.Waits, s.Hits, s.RunnableExits, s.BudgetExhausted,
				s.Parks, s.Polls, s.PollsFound, float64(s.SpinTime.Microseconds())/1000, perOp, float64(s.Budget.Nanoseconds())/1000)
		}
	}
	return tw.Flush()
}

// WriteContention writes, for every result whose qdiscs keep a profile, the
// counters, a `perf lock contention` table and a WritePacket latency
// histogram of the client's qdisc (the senders' side) and the server's.
func WriteContention(w io.Writer, rs []Result) error {
	for _, r := range rs {
		if r.Contention == nil {
			continue
		}
		for _, side := range []struct {
			name string
			s    *sched.Stats
		}{{"client", r.Contention.Client}, {"server", r.Contention.Server}} {
			if side.s == nil || side.s.Offered == 0 {
				continue // no traffic that way (udp_stream's server)
			}
			s := side.s
			fmt.Fprintf(w, "\n== %s %s senders=%d: %s qdisc (%s)\n", r.Test, r.Qdisc, r.Senders, side.name, s.Strategy)
			fmt.Fprintf(w, "offered %d  enqueued %d  bypassed %d  handed off %d  sent %d in %d batches  requeued %d  quota hand-offs %d  link full %d  refused %d (overlimit %d, burst %d)  dropped %d (overlimit %d, link %d)\n",
				s.Offered, s.Enqueued, s.Bypassed, s.HandedOff, s.Sent, s.Batches, s.Requeued, s.QuotaHandoffs, s.LinkFull,
				s.Refused.Total(), s.Refused.Overlimit, s.Refused.Burst, s.Dropped.Total(), s.Dropped.Overlimit, s.Dropped.Link)
			if err := s.WriteContention(w); err != nil {
				return err
			}
		}
	}
	return nil
}
