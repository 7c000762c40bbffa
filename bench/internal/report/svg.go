package report

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// palette holds distinguishable line colours, one per series in order.
var palette = []string{
	"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#843c39",
	"#e7969c", "#3182bd",
}

// Chart geometry, in SVG user units.
const (
	panelW, panelH = 440.0, 300.0
	marginL        = 70.0
	marginT        = 50.0
	gap            = 90.0
	legendRowH     = 18.0
)

// SVG draws the main matrix as two line charts side by side: decisions per
// second (linear scale) and p99 latency (log scale) against the number of
// callers. Floodgate's series are solid, the other limiters dashed, the
// bare-script baselines dotted. It needs nothing beyond the standard
// library.
func SVG(r *Run) string {
	workers := r.Settings.Concurrency
	legendRows := (len(r.Redis) + 1) / 2
	width := marginL + 2*panelW + gap + 30
	height := marginT + panelH + 60 + float64(legendRows)*legendRowH + 10
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")

	var maxRate float64
	minLat, maxLat := math.Inf(1), 0.0
	for _, s := range r.Redis {
		for _, c := range s.Cells {
			maxRate = max(maxRate, c.PerSecond)
			if c.P99 > 0 {
				v := float64(c.P99) / float64(time.Millisecond)
				minLat, maxLat = min(minLat, v), max(maxLat, v)
			}
		}
	}
	rateTop := niceCeil(maxRate)
	latLo, latHi := math.Pow(10, math.Floor(math.Log10(max(minLat, 1e-3)))), math.Pow(10, math.Ceil(math.Log10(max(maxLat, 1e-3))))
	if latHi <= latLo {
		latHi = latLo * 10
	}

	x0a := marginL
	x0b := marginL + panelW + gap
	xAt := func(x0 float64, i int) float64 {
		if len(workers) == 1 {
			return x0 + panelW/2
		}
		return x0 + 20 + float64(i)*(panelW-40)/float64(len(workers)-1)
	}
	yRate := func(v float64) float64 { return marginT + panelH - v/rateTop*panelH }
	yLat := func(v float64) float64 {
		f := (math.Log10(v) - math.Log10(latLo)) / (math.Log10(latHi) - math.Log10(latLo))
		return marginT + panelH - f*panelH
	}

	// Axes, grids and labels.
	for p, x0 := range []float64{x0a, x0b} {
		w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", x0, marginT, panelW, panelH)
		for i, n := range workers {
			x := xAt(x0, i)
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, marginT, x, marginT+panelH)
			w(`<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, marginT+panelH+16, n)
		}
		w(`<text x="%.1f" y="%.1f" text-anchor="middle">concurrent callers</text>`+"\n", x0+panelW/2, marginT+panelH+34)
		if p == 0 {
			for i := 0; i <= 5; i++ {
				v := rateTop * float64(i) / 5
				y := yRate(v)
				w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x0+panelW, y)
				w(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, rate(v))
			}
			w(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="14" font-weight="bold">decisions per second</text>`+"\n", x0+panelW/2, marginT-18)
		} else {
			for v := latLo; v <= latHi*1.001; v *= 10 {
				for _, m := range []float64{1, 2, 5} {
					t := v * m
					if t > latHi*1.001 {
						break
					}
					y := yLat(t)
					w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x0+panelW, y)
					w(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, trimFloat(t))
				}
			}
			w(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="14" font-weight="bold">p99 latency (ms, log scale)</text>`+"\n", x0+panelW/2, marginT-18)
		}
	}

	// Series.
	for si, s := range r.Redis {
		color := palette[si%len(palette)]
		dash, width := seriesStyle(s.ID)
		var ptsA, ptsB []string
		for i, n := range workers {
			c, ok := s.At(n)
			if !ok {
				continue
			}
			ptsA = append(ptsA, fmt.Sprintf("%.1f,%.1f", xAt(x0a, i), yRate(c.PerSecond)))
			if c.P99 > 0 {
				ptsB = append(ptsB, fmt.Sprintf("%.1f,%.1f", xAt(x0b, i), yLat(float64(c.P99)/float64(time.Millisecond))))
			}
		}
		for _, pts := range [][]string{ptsA, ptsB} {
			if len(pts) == 0 {
				continue
			}
			w(`<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"><title>%s</title></polyline>`+"\n", color, width, dash, strings.Join(pts, " "), html.EscapeString(s.Name))
			for _, p := range pts {
				xy := strings.SplitN(p, ",", 2)
				w(`<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", xy[0], xy[1], color)
			}
		}
		// Legend entry.
		lx := marginL + float64(si%2)*(panelW+gap)
		ly := marginT + panelH + 60 + float64(si/2)*legendRowH
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", lx, ly-4, lx+28, ly-4, color, width, dash)
		w(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+34, ly, html.EscapeString(s.Name))
	}
	w("</svg>\n")
	return b.String()
}

// seriesStyle returns the dash attribute and stroke width of a series.
func seriesStyle(id string) (string, float64) {
	switch {
	case strings.HasPrefix(id, "fg-"):
		return "", 2.5
	case strings.HasPrefix(id, "tiny"):
		return ` stroke-dasharray="2,3"`, 1.5
	}
	return ` stroke-dasharray="7,4"`, 1.5
}

// niceCeil returns the smallest of 1, 2, 2.5, 5 × a power of ten that is ≥ v.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
