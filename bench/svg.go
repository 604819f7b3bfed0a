package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// writeSVG draws, by hand (no plotting dependency), grouped horizontal bars
// for the hot-key scenario with the largest W in "separate" mode: hand-off
// gap p50 and p99 (log scale, ms) and Redis commands per grant (linear), one
// group per library, with min–max whiskers over the repetitions.
func writeSVG(w io.Writer, rep *Report) error {
	var groups []HotkeyGroup
	maxW := 0
	for _, g := range rep.Hotkey {
		if g.Mode == "separate" && g.W > maxW {
			maxW = g.W
		}
	}
	for _, g := range rep.Hotkey {
		if g.Mode == "separate" && g.W == maxW {
			groups = append(groups, g)
		}
	}
	const (
		width    = 980
		labelW   = 120
		panelGap = 50
		barH     = 13
		top      = 64
		rowPad   = 12
		bottomH  = 56
	)
	panelW := (width - labelW - panelGap - 70) / 2
	rowH := 2*barH + rowPad
	height := top + len(groups)*rowH + bottomH
	if len(groups) == 0 {
		height = top + bottomH + 20
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	title := fmt.Sprintf("One hot key, W=%d goroutines with separate clients, hold %s ms (median of %d reps, whiskers = min–max)", maxW, fmtNum(rep.Meta.Params.HoldMs), rep.Meta.Reps)
	if len(groups) == 0 {
		title = "no hot-key 'separate' results in this run"
	}
	p(`<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", 10, html.EscapeString(title))

	x1 := labelW
	x2 := labelW + panelW + panelGap
	p(`<text x="%d" y="46" font-weight="bold">Hand-off gap, ms (log scale)</text>`+"\n", x1)
	p(`<text x="%d" y="46" font-weight="bold">Redis commands per grant</text>`+"\n", x2)

	// Gap panel: log10 scale over [lo, hi] decades.
	lo, hi := math.Inf(1), math.Inf(-1)
	cmax := 0.0
	for _, g := range groups {
		for _, v := range []float64{g.GapP50Ms.Min, g.GapP99Ms.Max, g.GapP50Ms.Median, g.GapP99Ms.Median} {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		cmax = math.Max(cmax, g.CmdsPerGrant.Max)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 10
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	gx := func(v float64) float64 {
		if v <= 0 {
			return float64(x1)
		}
		f := (math.Log10(v) - dlo) / (dhi - dlo)
		return float64(x1) + math.Max(0, math.Min(1, f))*float64(panelW)
	}
	cstep := niceStep(cmax / 5)
	cTop := math.Max(cstep, math.Ceil(cmax/cstep)*cstep)
	cx := func(v float64) float64 { return float64(x2) + math.Max(0, v)/cTop*float64(panelW) }

	plotBottom := top + len(groups)*rowH
	// Grid and axis labels.
	for d := dlo; d <= dhi; d++ {
		x := gx(math.Pow(10, d))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`+"\n", x, top-6, x, plotBottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, plotBottom+16, strconv.FormatFloat(math.Pow(10, d), 'f', -1, 64))
	}
	for v := 0.0; v <= cTop+cstep/2; v += cstep {
		x := cx(v)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ccc"/>`+"\n", x, top-6, x, plotBottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x, plotBottom+16, strconv.FormatFloat(v, 'f', -1, 64))
	}

	const (
		c50  = "#4e79a7"
		c99  = "#f28e2b"
		cCmd = "#59a14f"
	)
	whisker := func(xa, xb float64, y int) {
		yc := float64(y) + barH/2.0
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-width="1"/>`+"\n", xa, yc, xb, yc)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/>`+"\n", xa, y+3, xa, y+barH-3)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/>`+"\n", xb, y+3, xb, y+barH-3)
	}
	// bar draws a bar to x, its whisker over [wlo, whi], and its label
	// right of both.
	bar := func(x0, x, wlo, whi float64, y int, color, label string) {
		p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y, math.Max(1, x-x0), barH, color)
		whisker(wlo, whi, y)
		p(`<text x="%.1f" y="%d" fill="#222">%s</text>`+"\n", math.Max(x, whi)+5, y+barH-2, html.EscapeString(label))
	}
	for i, g := range groups {
		y := top + i*rowH
		p(`<text x="%d" y="%d" text-anchor="end" font-weight="bold">%s</text>`+"\n", labelW-10, y+barH+4, html.EscapeString(g.Lib))
		bar(float64(x1), gx(g.GapP50Ms.Median), gx(g.GapP50Ms.Min), gx(g.GapP50Ms.Max), y, c50, "p50 "+fmtNum(g.GapP50Ms.Median))
		bar(float64(x1), gx(g.GapP99Ms.Median), gx(g.GapP99Ms.Min), gx(g.GapP99Ms.Max), y+barH, c99, "p99 "+fmtNum(g.GapP99Ms.Median))
		cy := y + barH/2
		bar(float64(x2), cx(g.CmdsPerGrant.Median), cx(g.CmdsPerGrant.Min), cx(g.CmdsPerGrant.Max), cy, cCmd, fmtNum(g.CmdsPerGrant.Median))
	}
	// Axes and legend.
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", x1, top-6, x1, plotBottom)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", x2, top-6, x2, plotBottom)
	ly := plotBottom + 38
	p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">gap p50</text>`+"\n", x1, ly-10, c50, x1+16, ly)
	p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">gap p99</text>`+"\n", x1+90, ly-10, c99, x1+106, ly)
	p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">commands per grant (incl. calls inside Lua)</text>`+"\n", x2, ly-10, cCmd, x2+16, ly)
	p("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= x {
			return m * e
		}
	}
	return 10 * e
}
