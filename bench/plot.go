package bench

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlot draws the headline rate against senders, one panel per test
// and one line per qdisc, into a PNG file.
func WritePlot(path string, rs []Result) error {
	var tests, qdiscs []string
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen["t:"+r.Test] {
			seen["t:"+r.Test] = true
			tests = append(tests, r.Test)
		}
		if !seen["q:"+r.Qdisc] {
			seen["q:"+r.Qdisc] = true
			qdiscs = append(qdiscs, r.Qdisc)
		}
	}
	if len(tests) == 0 {
		return fmt.Errorf("plot %s: no results to plot", path)
	}
	panels := make([][]*plot.Plot, 1)
	for _, test := range tests {
		p := plot.New()
		p.Title.Text = test
		p.X.Label.Text = "senders"
		p.Y.Label.Text = "packets/s received"
		if test == TCPRR || test == UDPRR {
			p.Y.Label.Text = "transactions/s"
		}
		// A log axis spreads 1, 8, 64 evenly, but needs two distinct
		// positive values to have a range.
		xs := map[int]bool{}
		for _, r := range rs {
			if r.Test == test {
				xs[r.Senders] = true
			}
		}
		if len(xs) > 1 && !xs[0] {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		p.Legend.Top = true
		p.Legend.Left = true
		for i, q := range qdiscs {
			var pts plotter.XYs
			for _, r := range rs {
				if r.Test == test && r.Qdisc == q {
					pts = append(pts, plotter.XY{X: float64(r.Senders), Y: r.Rate()})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			p.Add(line, points)
			p.Legend.Add(q, line, points)
		}
		panels[0] = append(panels[0], p)
	}
	const panelW, panelH = 4 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(panelW*vg.Length(len(tests)), panelH)
	dc := draw.New(img)
	canvases := plot.Align(panels, draw.Tiles{Rows: 1, Cols: len(tests), PadX: vg.Millimeter * 4}, dc)
	for j, p := range panels[0] {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}
