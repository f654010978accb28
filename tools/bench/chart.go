package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chart draws bar charts side by side: drain throughput of the naive
// relay, the relay and the two raw limits; the relay's throughput by
// bucket count; and the steady stage's commit -> consumed p99, relay and
// floor, by offered load.
func (r *results) chart(path string) error {
	left, err := bars("Drain throughput (msgs/s)",
		[]string{"naive", "naive ×8", "relay", "raw pipeline", "raw limit"},
		[]float64{r.Naive.MsgsPerS, r.NaiveParallel.MsgsPerS, r.Relay.MsgsPerS, r.Raw.Pipeline.MsgsPerS, r.Raw.MsgsPerS},
		[]color.Color{gray, gray, blue, teal, green})
	if err != nil {
		return err
	}
	// Kafka alone is an order of magnitude faster here; a bar for it would
	// flatten the others.
	left.X.Label.Text = fmt.Sprintf("raw limit = min(DynamoDB %.0f, Kafka %.0f)", r.Raw.DynamoDB.MsgsPerS, r.Raw.Kafka.MsgsPerS)
	var names []string
	var vals []float64
	var cols []color.Color
	for _, b := range r.Buckets {
		names = append(names, fmt.Sprintf("%d buckets", b.Backlog.Buckets))
		vals = append(vals, b.MsgsPerS)
		cols = append(cols, blue)
	}
	right, err := bars("Relay throughput by BucketCount (msgs/s)", names, vals, cols)
	if err != nil {
		return err
	}
	plots := []*plot.Plot{left, right}
	if len(r.Steady) > 0 {
		names, vals, cols = nil, nil, nil
		for _, s := range r.Steady {
			c := blue
			if s.Handler == handlerFloor {
				c = gray
			}
			names = append(names, s.Profile.Name+"\n"+s.Handler)
			vals = append(vals, s.P99ms)
			cols = append(cols, c)
		}
		steady, err := bars("Steady state: commit → consumed p99 (ms)", names, vals, cols)
		if err != nil {
			return err
		}
		steady.Y.Label.Text = "milliseconds"
		steady.X.Label.Text = "offered msgs/s: relay (blue) and floor (gray)"
		plots = append(plots, steady)
	}
	return writePNG(path, plots, 5.5*vg.Inch)
}

// writePNG draws plots side by side, each width wide, into a PNG at path.
func writePNG(path string, plots []*plot.Plot, width vg.Length) error {
	img := vgimg.New(vg.Length(len(plots))*width, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Inch / 3, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, pl := range plots {
		pl.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var (
	gray  = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	blue  = color.RGBA{R: 51, G: 102, B: 204, A: 255}
	green = color.RGBA{R: 60, G: 150, B: 90, A: 255}
	teal  = color.RGBA{R: 90, G: 170, B: 170, A: 255}
)

// bars is one bar chart with a value label on each bar.
func bars(title string, names []string, vals []float64, cols []color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "messages per second"
	p.Y.Min = 0
	if len(vals) == 0 {
		return p, nil // a partial run: nothing measured
	}
	top := 0.0
	for i, v := range vals {
		b, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(40))
		if err != nil {
			return nil, err
		}
		b.Color = cols[i]
		b.LineStyle.Width = 0
		b.XMin = float64(i)
		p.Add(b)
		top = max(top, v)
	}
	xys := make(plotter.XYs, len(vals))
	labels := make([]string, len(vals))
	for i, v := range vals {
		xys[i] = plotter.XY{X: float64(i), Y: v + top*0.02}
		labels[i] = fmt.Sprintf("%.0f", v)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
	}
	p.Add(l)
	p.Y.Max = top * 1.12
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ticks := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ticks {
			if ticks[i].Label != "" {
				ticks[i].Label = fmt.Sprintf("%.0f", ticks[i].Value)
			}
		}
		return ticks
	})
	p.NominalX(names...)
	return p, nil
}
