package bench

import (
	"context"
	"math"
	"reflect"
	"slices"
)

// Progress is told about each cell as it starts: done of total runs are
// finished.
type Progress func(done, total int, c Config)

// RunPlan runs every cell of p Count times (AutoCount if 0), alternating:
// all cells once, then all cells again, so that drift over the run lands on
// every configuration alike. It returns one result per cell, each field the
// median over the repeats, in Cells order.
func RunPlan(ctx context.Context, p Plan, progress Progress) ([]Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	count := p.Count
	if count == 0 {
		count = p.AutoCount()
	}
	cells := p.Cells()
	runs := make([][]Result, len(cells))
	total := count * len(cells)
	for rep := range count {
		for i, c := range cells {
			if progress != nil {
				progress(rep*len(cells)+i, total, c)
			}
			res, err := Run(ctx, c)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], res)
		}
	}
	if progress != nil {
		progress(total, total, Config{})
	}
	out := make([]Result, len(cells))
	for i := range cells {
		out[i] = Median(runs[i])
	}
	return out, nil
}

// Median returns a Result whose every numeric field is the median of that
// field over rs (the mean of the middle two for an even count), like
// benchstat; the string fields are rs[0]'s.
func Median(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	out := rs[0]
	ov := reflect.ValueOf(&out).Elem()
	vals := make([]float64, len(rs))
	for f := range ov.NumField() {
		if ov.Field(f).Kind() != reflect.Float64 {
			continue
		}
		for i := range rs {
			vals[i] = reflect.ValueOf(rs[i]).Field(f).Float()
		}
		slices.Sort(vals)
		m := vals[len(vals)/2]
		if len(vals)%2 == 0 {
			m = (vals[len(vals)/2-1] + m) / 2
		}
		ov.Field(f).SetFloat(m)
	}
	// Nested profiles have no field-wise median: take the run whose
	// headline rate is nearest the median rate.
	best := 0
	for i, r := range rs {
		if math.Abs(r.Rate()-out.Rate()) < math.Abs(rs[best].Rate()-out.Rate()) {
			best = i
		}
	}
	out.Contention = rs[best].Contention
	out.BusyPollStats = rs[best].BusyPollStats
	return out
}
