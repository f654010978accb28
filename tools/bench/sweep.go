package main

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The cost sweep's table lives in docs/capacity.md between these markers;
// write replaces what is between them (the prose around stays the
// author's), and draws capacity.png beside it.
const (
	sweepBegin = "<!-- bench:sweep:begin (written by make bench from benchmarks.json; edits between the markers are lost) -->"
	sweepEnd   = "<!-- bench:sweep:end -->"
)

// sweepOrder sorts the sweep by mode, window and rate.
func sweepOrder(rs []steadyResult) []steadyResult {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b steadyResult) int {
		return cmp.Or(cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.WindowS, b.WindowS), cmp.Compare(a.Profile.Rate, b.Profile.Rate))
	})
	return out
}

// sweepTable is the markdown table of the sweep: cost beside latency.
func (r *results) sweepTable() string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("Measured by `make bench` on %s (%s); prices as above plus Lambda at $%.2f per million requests and\n",
		r.Generated[:min(10, len(r.Generated))], fmt.Sprintf("%d cores, %s, DynamoDB Local and kfake", r.Machine.Cores, r.Machine.CPU), lambdaPricePerMillionRequests)
	p("$%.10f per GB-second (arm64, us-east-1), %g MB, the handler's mean in-process time per invocation.\n", lambdaPricePerGBSecond, relayMemoryGB*1024)
	p("Per message: the writer's and the relay's DynamoDB capacity, the relay's invocations; latency is commit → consumed.\n\n")
	p("| mode | window | msgs/s | WCU | RCU | control writes | invocations | DynamoDB $/M | Lambda $/M | **total $/M** | p50 | p99 |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sweepOrder(r.Sweep) {
		p("| %s | %g s | %s | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f | **%.2f** | %.0f ms | %.0f ms |\n",
			s.Mode, s.WindowS, s.Profile.Name, s.WCU, s.RCU, s.ControlWritesPerMsg, s.InvocationsPerMsg,
			s.USDPerMillion, s.LambdaUSDPerMillion, s.TotalUSDPerMillion, s.P50ms, s.P99ms)
	}
	p("\n![cost and latency by rate, window and mode](capacity.png)\n")
	return b.String()
}

// writeCapacity replaces the sweep section of dir/capacity.md (if the file
// has the markers) and draws dir/capacity.png. Without a sweep it does
// nothing.
func (r *results) writeCapacity(dir string) error {
	if len(r.Sweep) == 0 {
		return nil
	}
	path := filepath.Join(dir, "capacity.md")
	doc, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return err
	default:
		i, j := bytes.Index(doc, []byte(sweepBegin)), bytes.Index(doc, []byte(sweepEnd))
		if i < 0 || j < i {
			return fmt.Errorf("%s: no %q ... %q section for the sweep's table", path, sweepBegin, sweepEnd)
		}
		var out bytes.Buffer
		out.Write(doc[:i+len(sweepBegin)])
		out.WriteString("\n\n" + r.sweepTable() + "\n")
		out.Write(doc[j:])
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return r.sweepChart(filepath.Join(dir, "capacity.png"))
}

// sweepChart draws total cost per million and p99 latency against the
// offered rate (log scale), one line per mode and batching window.
func (r *results) sweepChart(path string) error {
	type key struct {
		mode   string
		window float64
	}
	series := map[key]plotter.XYs{}
	lat := map[key]plotter.XYs{}
	var keys []key
	for _, s := range sweepOrder(r.Sweep) {
		k := key{s.Mode, s.WindowS}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], plotter.XY{X: s.Profile.Rate, Y: s.TotalUSDPerMillion})
		lat[k] = append(lat[k], plotter.XY{X: s.Profile.Rate, Y: s.P99ms})
	}
	shades := map[string][]color.Color{
		"delete":    {color.RGBA{R: 20, G: 60, B: 150, A: 255}, blue, color.RGBA{R: 130, G: 170, B: 235, A: 255}},
		"watermark": {color.RGBA{R: 20, G: 100, B: 50, A: 255}, green, color.RGBA{R: 140, G: 205, B: 160, A: 255}},
	}
	// The legend goes where the lines are not: bottom left of the cost
	// panel (costs fall with the rate, all above $1), and in the middle of
	// the latency panel (between the 0-1 s windows' lines and the 5 s ones').
	panel := func(title, ylabel, format string, legendUp vg.Length, data map[key]plotter.XYs) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "offered messages per second (log scale)"
		p.Y.Label.Text = ylabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = 0
		p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
			ticks := plot.DefaultTicks{}.Ticks(lo, hi)
			for i := range ticks {
				if ticks[i].Label != "" {
					ticks[i].Label = fmt.Sprintf(format, ticks[i].Value)
				}
			}
			return ticks
		})
		p.Legend.Left = true
		p.Legend.XOffs = vg.Inch / 4
		p.Legend.YOffs = legendUp
		for i, k := range keys {
			l, pts, err := plotter.NewLinePoints(data[k])
			if err != nil {
				return nil, err
			}
			cols := shades[k.mode]
			if cols == nil {
				cols = []color.Color{gray}
			}
			c := cols[i%len(cols)]
			l.Color, pts.Color = c, c
			l.Width = vg.Points(1.5)
			if k.window > 0 {
				l.Dashes = []vg.Length{vg.Points(2 + 2*k.window), vg.Points(2)}
			}
			p.Add(l, pts)
			p.Legend.Add(fmt.Sprintf("%s, window %g s", k.mode, k.window), l, pts)
		}
		return p, nil
	}
	cost, err := panel("Cost per million messages (DynamoDB + Lambda, USD)", "USD per million", "%.1f", vg.Inch/8, series)
	if err != nil {
		return err
	}
	p99, err := panel("Commit → consumed p99 (ms)", "milliseconds", "%.0f", 1.4*vg.Inch, lat)
	if err != nil {
		return err
	}
	return writePNG(path, []*plot.Plot{cost, p99}, 6*vg.Inch)
}
