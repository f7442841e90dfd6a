package main

import (
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// writePlots writes the PNG plots of the loaded results into dir and
// returns their paths by name.
func writePlots(l *loaded, dir string) (map[string]string, error) {
	out := map[string]string{}
	save := func(name string, p *plot.Plot, w, h vg.Length) error {
		path := filepath.Join(dir, name+".png")
		if err := p.Save(w, h, path); err != nil {
			return err
		}
		out[name] = path
		return nil
	}
	if d := l.decisions; d != nil {
		if p, err := decisionsPlot(d); err != nil {
			return nil, err
		} else if p != nil {
			if err := save("decisions", p, 8*vg.Inch, 5*vg.Inch); err != nil {
				return nil, err
			}
		}
	}
	if f := l.flood; f != nil {
		p, err := floodLatencyPlot(f)
		if err != nil {
			return nil, err
		}
		if err := save("flood-latency", p, 8*vg.Inch, 5.5*vg.Inch); err != nil {
			return nil, err
		}
		if p, err = floodCPUPlot(f); err != nil {
			return nil, err
		}
		if err := save("flood-cpu", p, 8*vg.Inch, 5.5*vg.Inch); err != nil {
			return nil, err
		}
		if len(f.Sweep) > 0 {
			if p, err = admittedPlot(f); err != nil {
				return nil, err
			}
			if err := save("admitted", p, 8*vg.Inch, 5.5*vg.Inch); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func rotateX(p *plot.Plot) {
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = text.XRight
	p.X.Tick.Label.YAlign = text.YCenter
}

func glyphs(s *plotter.Scatter, i int) {
	s.GlyphStyle.Color = plotutil.Color(i)
	s.GlyphStyle.Shape = plotutil.Shape(i)
	s.GlyphStyle.Radius = vg.Points(4)
}

// decisionsPlot: ns per decision of every available limiter, serial and
// parallel, on a log axis.
func decisionsPlot(d *DecisionsData) (*plot.Plot, error) {
	var names []string
	var serial, parallel plotter.XYs
	for _, r := range d.Rows {
		if r.Unavailable != "" || r.Serial == nil {
			continue
		}
		y := float64(len(names))
		names = append(names, r.Name)
		serial = append(serial, plotter.XY{X: r.Serial.NsPerOp, Y: y})
		parallel = append(parallel, plotter.XY{X: r.Parallel.NsPerOp, Y: y})
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Cost of one decision, 100,000 keys (lower is better)"
	p.X.Label.Text = "ns per decision (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.NominalY(names...)
	p.Add(plotter.NewGrid())
	for i, s := range []struct {
		name string
		xys  plotter.XYs
	}{{"serial", serial}, {"parallel (GOMAXPROCS goroutines)", parallel}} {
		sc, err := plotter.NewScatter(s.xys)
		if err != nil {
			return nil, err
		}
		glyphs(sc, i)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	return p, nil
}

// floodLatencyPlot: the legitimate client's p50/p95/p99 per configuration,
// and the allowed flood requests' p95, on a log axis.
func floodLatencyPlot(f *FloodData) (*plot.Plot, error) {
	var names []string
	series := make([]plotter.XYs, 4)
	for _, ph := range f.Phases {
		if ph.Unavailable != "" {
			continue
		}
		x := float64(len(names))
		names = append(names, ph.ID)
		floor := func(v float64) float64 { return math.Max(v, 0.1) }
		series[0] = append(series[0], plotter.XY{X: x, Y: floor(ph.Legit.All.P50)})
		series[1] = append(series[1], plotter.XY{X: x, Y: floor(ph.Legit.All.P95)})
		series[2] = append(series[2], plotter.XY{X: x, Y: floor(ph.Legit.All.P99)})
		if ph.Flood.Allowed.N > 0 {
			series[3] = append(series[3], plotter.XY{X: x + 0.15, Y: floor(ph.Flood.Allowed.P95)})
		}
	}
	p := plot.New()
	p.Title.Text = "Flood on a CPU-bound search: legitimate client's latency"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.NominalX(names...)
	rotateX(p)
	p.Add(plotter.NewGrid())
	// The published experiment's figures, for reference.
	for i, ref := range []struct {
		ms   float64
		name string
	}{{960, "published: p95 without a limiter"}, {137, "published: allowed p95 with nginx limit_req"}} {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref.ms}, {X: float64(len(names)) - 0.5, Y: ref.ms}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: uint8(90 + 60*i)}
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(ref.name, l)
	}
	labels := []string{"legit p50", "legit p95", "legit p99", "allowed flood requests p95"}
	for i, xys := range series {
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		glyphs(sc, i)
		p.Add(sc)
		p.Legend.Add(labels[i], sc)
	}
	// Room above the highest point for the legend.
	top := 1.0
	for _, xys := range series {
		for _, xy := range xys {
			top = math.Max(top, xy.Y)
		}
	}
	p.Y.Max = top * 30
	p.Legend.Top = true
	return p, nil
}

// floodCPUPlot: server and dynalite CPU per configuration.
func floodCPUPlot(f *FloodData) (*plot.Plot, error) {
	var names []string
	var server, store plotter.Values
	for _, ph := range f.Phases {
		if ph.Unavailable != "" {
			continue
		}
		names = append(names, ph.ID)
		server = append(server, 100*ph.ServerCPU)
		store = append(store, 100*ph.StoreCPU)
	}
	p := plot.New()
	p.Title.Text = "Flood on a CPU-bound search: CPU used (100% = one core)"
	p.Y.Label.Text = "% of one core"
	p.Y.Min = 0
	p.NominalX(names...)
	rotateX(p)
	p.Add(plotter.NewGrid())
	w := vg.Points(14)
	for i, s := range []struct {
		name string
		vs   plotter.Values
	}{{"server process (GOMAXPROCS=1)", server}, {"dynalite (the store)", store}} {
		b, err := plotter.NewBarChart(s.vs, w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-0.5) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.Y.Max = 140
	p.Legend.Top = true
	return p, nil
}

// admittedPlot: admitted vs offered load per strategy, log-log. A strategy
// that admits nothing is drawn at the floor, 1 request/s, and says so.
func admittedPlot(f *FloodData) (*plot.Plot, error) {
	const floor = 1.0
	p := plot.New()
	p.Title.Text = "Admitted vs offered load, one client, CPU-bound search"
	p.X.Label.Text = "offered requests/s (log scale)"
	p.Y.Label.Text = "admitted (2xx) requests/s (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var diag plotter.XYs
	for _, r := range sweepRates {
		diag = append(diag, plotter.XY{X: float64(r), Y: float64(r)})
	}
	l, err := plotter.NewLine(diag)
	if err != nil {
		return nil, err
	}
	l.Color = color.Gray{Y: 150}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(l)
	p.Legend.Add("admitted = offered", l)
	for i, s := range f.Sweep {
		var xys plotter.XYs
		zero := true
		for _, pt := range s.Points {
			xys = append(xys, plotter.XY{X: pt.Offered, Y: math.Max(pt.Admitted, floor)})
			zero = zero && pt.Admitted == 0
		}
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		name := s.ID
		if zero {
			name += " (admits nothing; drawn at 1)"
		}
		p.Legend.Add(name, l, sc)
	}
	p.Y.Min = floor * 0.8
	p.Y.Max = float64(sweepRates[len(sweepRates)-1]) * 4
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}
