// Command dashmock renders docs/dashboard.png: a picture of the CloudWatch
// dashboard that template.yaml creates, drawn from the EMF metric lines of
// a local run. It reads the dashboard's widgets and the alarm from
// template.yaml (internal/dashboard), evaluates each widget's SEARCH
// expression and the alarm's query over the lines, and draws the widgets
// in the dashboard's grid, so the picture follows the template.
//
// The lines come from -emf FILE (any EMF lines: a function's output under
// the Lambda Runtime Interface Emulator, or CloudWatch Logs), or, by
// default, from a simulated hour: the four example functions, in process,
// built as on Lambda (setup.FromEnv, middleware.HTTPAPI, the real
// handlers), their state in dynalite behind a proxy that a five-minute
// outage switches off, and a clock that runs at real speed (so store
// latencies are measured) but jumps from request to request. It needs
// dynalite: run it under internal/tools/testservers, as `make
// dashboard-mock` does.
//
// It lives in the bench module so that gonum/plot stays out of the main
// module's go.mod, as the benchmark plots do.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/edgelimit/edgelimit/internal/dashboard"
)

func main() {
	root := flag.String("root", "..", "the repository root (template.yaml, docs/)")
	out := flag.String("out", "", "PNG to write (default ROOT/docs/dashboard.png)")
	emf := flag.String("emf", "", "read EMF lines from this file instead of simulating")
	saveEMF := flag.String("save-emf", "", "also write the simulated EMF lines to this file")
	minutes := flag.Int("minutes", 60, "simulated minutes")
	flag.Parse()
	if *out == "" {
		*out = filepath.Join(*root, "docs", "dashboard.png")
	}
	if err := run(*root, *out, *emf, *saveEMF, *minutes); err != nil {
		fmt.Fprintln(os.Stderr, "dashmock:", err)
		os.Exit(1)
	}
}

func run(root, out, emfFile, saveEMF string, minutes int) error {
	tpl, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		return err
	}
	d, err := dashboard.Load(tpl, nil)
	if err != nil {
		return err
	}
	var caption string
	var points []dashboard.Point
	if emfFile != "" {
		f, err := os.Open(emfFile)
		if err != nil {
			return err
		}
		points, err = dashboard.ReadEMF(f)
		f.Close()
		if err != nil {
			return err
		}
		caption = "EMF lines of " + filepath.Base(emfFile)
	} else {
		endpoint := os.Getenv("EDGELIMIT_DYNALITE_ENDPOINT")
		if endpoint == "" {
			return errNoDynalite
		}
		sc := scenario{start: time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC), minutes: minutes, outageFrom: minutes * 41 / 60, outageTo: minutes * 46 / 60}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		began := time.Now()
		lines, err := simulate(ctx, endpoint, sc)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "dashmock: simulated %s in %s\n", sc, time.Since(began).Round(time.Second))
		if saveEMF != "" {
			if err := os.WriteFile(saveEMF, lines, 0o644); err != nil {
				return err
			}
		}
		if points, err = dashboard.ReadEMF(bytesReader(lines)); err != nil {
			return err
		}
		caption = "a local run of the four example functions on dynalite: " + sc.String()
	}
	if len(points) == 0 {
		return fmt.Errorf("no EMF lines")
	}
	start, end := span(points)
	if err := render(d, points, start, end, caption, out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dashmock: %d EMF lines, %s to %s: wrote %s\n", len(points), start.Format("15:04"), end.Format("15:04"), out)
	return nil
}

// span is the whole minutes the points cover.
func span(points []dashboard.Point) (time.Time, time.Time) {
	start, end := points[0].Time, points[0].Time
	for _, p := range points {
		if p.Time.Before(start) {
			start = p.Time
		}
		if p.Time.After(end) {
			end = p.Time
		}
	}
	return start.Truncate(time.Minute), end.Truncate(time.Minute).Add(time.Minute)
}
