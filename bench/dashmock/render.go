package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/edgelimit/edgelimit/internal/dashboard"
)

// The picture's grid: CloudWatch dashboards are 24 columns wide; a row is
// a widget height unit.
const (
	column = 0.75 * vg.Inch
	row    = 0.55 * vg.Inch
	header = 0.6 * vg.Inch
	pad    = 0.06 * vg.Inch
	dpi    = 96
)

var (
	red   = color.RGBA{R: 0xd1, G: 0x32, B: 0x12, A: 0xff}
	green = color.RGBA{R: 0x1d, G: 0x8a, B: 0x3a, A: 0xff}
	white = color.White
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// render draws every widget of d from points into a PNG at out.
func render(d *dashboard.Dashboard, points []dashboard.Point, start, end time.Time, caption, out string) error {
	rows := 0
	for _, w := range d.Widgets {
		rows = max(rows, w.Y+w.Height)
	}
	width, height := 24*column, header+vg.Length(rows)*row
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.FillPolygon(white, []vg.Point{{X: 0, Y: 0}, {X: width, Y: 0}, {X: width, Y: height}, {X: 0, Y: height}})

	title := plot.New()
	title.HideAxes()
	title.Title.Text = "edgelimit dashboard (template.yaml), rendered from " + caption
	title.Title.TextStyle.Font.Size = vg.Points(13)
	title.Draw(draw.Canvas{Canvas: dc, Rectangle: vg.Rectangle{Min: vg.Point{X: 0, Y: height - header}, Max: vg.Point{X: width, Y: height}}})

	for _, w := range d.Widgets {
		var p *plot.Plot
		var err error
		switch w.Type {
		case "metric":
			if w.Insight != nil {
				p, err = insightWidget(w, d.Rule, points, start, end)
				break
			}
			p, err = metricWidget(w, points, start, end)
		case "alarm":
			p, err = alarmWidget(w, d.Alarm, points, start, end)
		default:
			err = fmt.Errorf("widget %q: type %q is not drawn", w.Title, w.Type)
		}
		if err != nil {
			return err
		}
		top := height - header - vg.Length(w.Y)*row
		r := vg.Rectangle{
			Min: vg.Point{X: vg.Length(w.X)*column + pad, Y: top - vg.Length(w.Height)*row + pad},
			Max: vg.Point{X: vg.Length(w.X+w.Width)*column - pad, Y: top - pad},
		}
		p.Draw(draw.Canvas{Canvas: dc, Rectangle: r})
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func timeAxis(p *plot.Plot, start, end time.Time) {
	p.X.Min, p.X.Max = float64(start.Unix()), float64(end.Unix())
	p.X.Tick.Marker = plot.TimeTicks{Format: "15:04", Ticker: minuteTicks{}}
	p.Y.Tick.Marker = plainTicks{}
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	p.Y.Label.TextStyle.Font.Size = vg.Points(9)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Add(plotter.NewGrid())
}

// minuteTicks marks every 10 minutes (labelled) and every 5 (not), on
// Unix seconds.
type minuteTicks struct{}

func (minuteTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for t := math.Ceil(lo/300) * 300; t <= hi; t += 300 {
		tk := plot.Tick{Value: t}
		if math.Mod(t, 600) == 0 {
			tk.Label = "x" // TimeTicks replaces a label with the time
		}
		ticks = append(ticks, tk)
	}
	return ticks
}

// plainTicks are the default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// metricWidget draws a metric widget: one line per series its SEARCH
// finds, at the middle of each period, periods without data left out.
func metricWidget(w dashboard.Widget, points []dashboard.Point, start, end time.Time) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = w.Title
	p.Y.Label.Text = w.YLabel
	timeAxis(p, start, end)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = 0.25 * vg.Inch
	ymax := 0.0
	n := 0
	for _, s := range w.Searches {
		series, err := dashboard.Evaluate(s, points, start, end)
		if err != nil {
			return nil, err
		}
		for _, ser := range series {
			var xys plotter.XYs
			for i, v := range ser.Values {
				if math.IsNaN(v) {
					continue
				}
				t := ser.Start.Add(time.Duration(i)*ser.Period + ser.Period/2)
				xys = append(xys, plotter.XY{X: float64(t.Unix()), Y: v})
				ymax = math.Max(ymax, v)
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.Color = plotutil.Color(n)
			l.Width = vg.Points(1.4)
			p.Add(l)
			p.Legend.Add(ser.Label, l)
			n++
		}
	}
	for label, v := range w.Horizontal {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: v}, {X: p.X.Max, Y: v}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes, l.Width = red, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(label, l)
		ymax = math.Max(ymax, v)
	}
	if n == 0 {
		p.Title.Text += " (no data)"
	}
	p.Y.Min = 0
	if w.YMin != nil {
		p.Y.Min = *w.YMin
	}
	// Room above the lines for the legend.
	p.Y.Max = math.Max(ymax, 1) * (1.25 + 0.12*float64(n+len(w.Horizontal)))
	return p, nil
}

// alarmWidget draws the alarm widget as the alarm's state over time: ALARM
// in red, OK in green, as the alarm would have been evaluated on these
// metrics.
func alarmWidget(w dashboard.Widget, a dashboard.Alarm, points []dashboard.Point, start, end time.Time) (*plot.Plot, error) {
	if len(w.Alarms) != 1 || w.Alarms[0] != a.ARN {
		return nil, fmt.Errorf("widget %q: shows alarms %v, not the one the template declares", w.Title, w.Alarms)
	}
	_, alarms, err := a.Evaluate(points, start, end)
	if err != nil {
		return nil, err
	}
	p := plot.New()
	timeAxis(p, start, end)
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks{}
	var spans []string
	last := start
	band := func(from, to time.Time, c color.Color) error {
		if !to.After(from) {
			return nil
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: float64(from.Unix()), Y: 0.15}, {X: float64(to.Unix()), Y: 0.15},
			{X: float64(to.Unix()), Y: 0.85}, {X: float64(from.Unix()), Y: 0.85}})
		if err != nil {
			return err
		}
		poly.Color, poly.LineStyle.Width = c, 0
		p.Add(poly)
		return nil
	}
	for _, iv := range alarms {
		if err := band(last, iv.From, green); err != nil {
			return nil, err
		}
		if err := band(iv.From, iv.To, red); err != nil {
			return nil, err
		}
		spans = append(spans, iv.From.Format("15:04")+"–"+iv.To.Format("15:04"))
		last = iv.To
	}
	if err := band(last, end, green); err != nil {
		return nil, err
	}
	state := "OK throughout"
	if len(spans) > 0 {
		state = "ALARM " + strings.Join(spans, ", ") + ", OK otherwise"
	}
	cmp := map[string]string{"GreaterThanOrEqualToThreshold": "≥", "GreaterThanThreshold": ">"}[a.Comparison]
	p.Title.Text = fmt.Sprintf("%s: %s (%d of %d minutes with %s %g %s) — %s",
		w.Title, a.Name, a.DatapointsToAlarm, a.EvaluationPeriods, cmp, a.Threshold, a.Metric, state)
	return p, nil
}

// insightWidget draws a Contributor Insights widget: its rule evaluated
// over the lines, one line per top contributor (policy · key hash), its
// value per period, as CloudWatch graphs a rule's top contributors.
func insightWidget(w dashboard.Widget, r dashboard.InsightRule, points []dashboard.Point, start, end time.Time) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = w.Title
	timeAxis(p, start, end)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = 0.25 * vg.Inch
	period := time.Duration(w.Period) * time.Second
	top := r.Body.Top(points, start, end, period, w.Insight.MaxContributorCount)
	ymax := 0.0
	for n, c := range top {
		var xys plotter.XYs
		for i, v := range c.Values {
			if math.IsNaN(v) {
				continue
			}
			t := c.Start.Add(time.Duration(i)*c.Period + c.Period/2)
			xys = append(xys, plotter.XY{X: float64(t.Unix()), Y: v})
			ymax = math.Max(ymax, v)
		}
		// Points as well as lines: a key denied in one minute only is one
		// point.
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = plotutil.Color(n), vg.Points(1.2)
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(n), draw.CircleGlyph{}, vg.Points(2.2)
		p.Add(l, sc)
		p.Legend.Add(fmt.Sprintf("%s (%g)", c.Label, c.Total), l, sc)
	}
	if len(top) == 0 {
		p.Title.Text += " (no data)"
	}
	p.Y.Label.Text = "denials"
	p.Y.Min = 0
	p.Y.Max = math.Max(ymax, 1) * (1.25 + 0.12*float64(len(top)))
	return p, nil
}
