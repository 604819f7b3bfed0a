package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// clusterPanel is one chart of the cluster scenario: a metric against the
// number of masters, one line per mode.
type clusterPanel struct {
	title string
	value func(ClusterGroup) Summary
}

var clusterPanels = []clusterPanel{
	{"Cluster bus publish messages per grant (hot key)", func(g ClusterGroup) Summary { return g.BusPerGrant }},
	{"Redis CPU per grant above idle, µs (hot key)", func(g ClusterGroup) Summary { return g.CPUGrantNetUs }},
	{"Uncontended pairs/s (16 goroutines)", func(g ClusterGroup) Summary { return g.PairsPerS }},
}

var clusterModeColor = map[string]string{"sharded": "#4e79a7", "classic": "#e15759"}

// writeClusterSVG draws the cluster scenario's panels side by side, by hand
// like writeSVG: medians joined by lines, min–max whiskers.
func writeClusterSVG(w io.Writer, rep *ClusterReport) {
	const (
		panelW, panelH = 300, 220
		left, gap, top = 60, 70, 60
	)
	width := left + len(clusterPanels)*(panelW+gap)
	height := top + panelH + 70
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	title := fmt.Sprintf("dlock on Redis Cluster, M masters + M replicas: sharded vs classic pub/sub (median of %d reps, whiskers = min–max)", rep.Config.Reps)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	maxM := 1
	for _, g := range rep.Groups {
		maxM = max(maxM, g.Masters)
	}
	for i, p := range clusterPanels {
		x0 := left + i*(panelW+gap)
		drawClusterPanel(&b, rep.Groups, p, x0, top, panelW, panelH, maxM)
	}
	ly := top + panelH + 56
	for i, mode := range []string{"sharded", "classic"} {
		x := left + i*120
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, ly-10, clusterModeColor[mode], x+16, ly, mode)
	}
	b.WriteString("</svg>\n")
	_, _ = io.WriteString(w, b.String())
}

// drawClusterPanel draws one panel with its top-left corner at (x0, y0).
func drawClusterPanel(b *strings.Builder, groups []ClusterGroup, p clusterPanel, x0, y0, pw, ph, maxM int) {
	p2 := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	vmax := 0.0
	for _, g := range groups {
		vmax = math.Max(vmax, p.value(g).Max)
	}
	step := niceStep(vmax / 4)
	vtop := math.Max(step, math.Ceil(vmax/step)*step)
	px := func(m int) float64 { return float64(x0) + float64(m)/float64(maxM)*float64(pw) }
	py := func(v float64) float64 { return float64(y0+ph) - math.Max(0, v)/vtop*float64(ph) }
	p2(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-14, html.EscapeString(p.title))
	for v := 0.0; v <= vtop+step/2; v += step {
		p2(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, py(v), x0+pw, py(v))
		p2(`<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", x0-6, py(v)+4, strconv.FormatFloat(v, 'f', -1, 64))
	}
	seen := map[int]bool{}
	for _, g := range groups {
		if !seen[g.Masters] {
			seen[g.Masters] = true
			p2(`<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%d</text>`+"\n", px(g.Masters), y0+ph+16, g.Masters)
		}
	}
	p2(`<text x="%.1f" y="%d" text-anchor="middle" fill="#444">masters</text>`+"\n", float64(x0)+float64(pw)/2, y0+ph+34)
	p2(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", x0, y0, x0, y0+ph)
	p2(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", x0, y0+ph, x0+pw, y0+ph)
	for _, mode := range []string{"sharded", "classic"} {
		color := clusterModeColor[mode]
		var pts []string
		for _, g := range groups {
			if g.Mode != mode {
				continue
			}
			s := p.value(g)
			x := px(g.Masters)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, py(s.Median)))
			p2(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, py(s.Min), x, py(s.Max), color)
			p2(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, py(s.Median), color)
			p2(`<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x+6, py(s.Median)-5, color, fmtNum(s.Median))
		}
		if len(pts) > 1 {
			p2(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		}
	}
}
