package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// costFits are the lines RESULTS.md's cost model gives per lib.
type costFits struct {
	grantCPU, grantCmds *Line // per grant vs W (medians over reps), W >= 2
	// aloneCPU is the W=1 point (no waiter: an uncontended pair), a regime
	// of its own (no wait, no wake-up), so not on the line.
	aloneCPU *float64
	waitCPU  *Line // total µs per second vs P (holder + P waiters)
	held     *CostHeldRun
}

// fitCost fits every lib's lines from a CostResult; libs in first-seen order.
func fitCost(c *CostResult) (libs []string, fits map[string]*costFits) {
	fits = map[string]*costFits{}
	get := func(lib string) *costFits {
		f, ok := fits[lib]
		if !ok {
			f = &costFits{}
			fits[lib] = f
			libs = append(libs, lib)
		}
		return f
	}
	type pts struct{ x, cpu, cmds []float64 }
	grant := map[string]*pts{}
	for _, g := range c.Grant {
		f := get(g.Lib)
		if g.W == 1 {
			v := g.CPUGrantUs.Median
			f.aloneCPU = &v
			continue
		}
		p := grant[g.Lib]
		if p == nil {
			p = &pts{}
			grant[g.Lib] = p
		}
		p.x = append(p.x, float64(g.W))
		p.cpu = append(p.cpu, g.CPUGrantUs.Median)
		p.cmds = append(p.cmds, g.CmdsPerGrant.Median)
	}
	for lib, p := range grant {
		if l, err := fitLine(p.x, p.cpu); err == nil {
			fits[lib].grantCPU = &l
		}
		if l, err := fitLine(p.x, p.cmds); err == nil {
			fits[lib].grantCmds = &l
		}
	}
	wait := map[string]*pts{}
	for _, w := range c.Waiting {
		get(w.Lib)
		if w.Error != "" || w.Granted > 0 || w.WindowS <= 0 {
			continue
		}
		p := wait[w.Lib]
		if p == nil {
			p = &pts{}
			wait[w.Lib] = p
		}
		p.x = append(p.x, float64(w.P))
		p.cpu = append(p.cpu, w.CPUUs/w.WindowS)
	}
	for lib, p := range wait {
		if l, err := fitLine(p.x, p.cpu); err == nil {
			fits[lib].waitCPU = &l
		}
	}
	for i := range c.Held {
		h := &c.Held[i]
		get(h.Lib)
		if h.Error == "" {
			fits[h.Lib].held = h
		}
	}
	return libs, fits
}

func writeCost(w io.Writer, rep *Report) {
	c := rep.Cost
	if c == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	libs, fits := fitCost(c)
	reps := rep.Meta.Reps

	p("## (f) Cost model\n\n")
	p("What Redis's main thread (`INFO cpu` `used_cpu_user_main_thread` + `used_cpu_sys_main_thread`, as in (a) and (b)) spends on locks, as three rates to add up for a deployment. Lines are least-squares fits over this run's points; *worst point* is the largest relative distance of a point from its line. Per grant, the line is fitted over W ≥ 2 (someone waits); W = 1, a lone acquirer that never waits, is given apart.\n\n")
	p("| lib | Redis CPU per grant, W ≥ 2 waiters on the key | W = 1 | per held lock per renewal period | per waiting process per second |\n|---|---|---|---|---|\n")
	for _, lib := range libs {
		f := fits[lib]
		grant, alone, held, wait := "–", "–", "–", "–"
		if f.aloneCPU != nil {
			alone = fmtNum(*f.aloneCPU) + " µs"
		}
		if f.grantCPU != nil {
			grant = fmt.Sprintf("≈ %s µs (worst point %.0f%% off)", f.grantCPU.String("W"), 100*f.grantCPU.MaxRelDev)
		}
		if h := f.held; h != nil {
			held = fmt.Sprintf("%s µs (period %s s; %s µs per lock per second)", fmtNum(h.CPUPerLockPeriodUs), fmtNum(h.RenewalS), fmtNum(h.CPUPerLockSecUs))
		} else if !slices.ContainsFunc(c.Held, func(h CostHeldRun) bool { return h.Lib == lib }) {
			held = "no renewal (fixed TTL)"
		}
		if f.waitCPU != nil {
			wait = fmt.Sprintf("%s µs/s (total ≈ %s µs/s; the constant is Redis's own background work and the holder)", fmtNum(f.waitCPU.B), f.waitCPU.String("P"))
		}
		p("| %s | %s | %s | %s | %s |\n", lib, grant, alone, held, wait)
	}
	p("\n")
	if f := fits["dlock"]; f != nil && f.grantCPU != nil && f.held != nil && f.waitCPU != nil && f.aloneCPU != nil {
		p("For dlock: a Redis making u uncontended grants per second, and g grants per second of keys with W ≥ 2 waiters, while N locks are held in watchdog mode (renewal period T = watchdog timeout / 3) and P processes wait, spends about\n\n")
		p("    u·%s + g·(%s + %s·W) + N·%s/T + P·%s  µs of main-thread CPU per second\n\n", fmtNum(*f.aloneCPU), fmtNum(f.grantCPU.A), fmtNum(f.grantCPU.B), fmtNum(f.held.CPUPerLockPeriodUs), fmtNum(f.waitCPU.B))
		p("(1,000,000 µs/s is one core). With the default 30 s watchdog, T = 10 s.\n\n")
	}

	if len(c.Grant) > 0 {
		ws := c.Config.W
		head := "| lib |"
		sep := "|---|"
		for _, x := range ws {
			head += fmt.Sprintf(" W=%d |", x)
			sep += "---|"
		}
		p("### Per grant vs waiters W\n\n")
		p("W Clients (*separate*, as in (b)) take turns on one key, K = max(1, %d/W) acquisitions each, holding it L = %s ms. Median over %d repetition(s), min–max in parentheses; the fit is over W ≥ 2. K falls as W grows, so a Client's one-time costs in the window (its pub/sub connection, its first wait) add about their cost × W / %d per grant: part of b.\n\n", c.Grants, fmtNum(c.Hold), reps, c.Grants)
		for _, t := range []struct {
			title string
			val   func(HotkeyGroup) Summary
			fit   func(*costFits) *Line
		}{
			{"Redis CPU µs per grant", func(g HotkeyGroup) Summary { return g.CPUGrantUs }, func(f *costFits) *Line { return f.grantCPU }},
			{"Redis commands per grant", func(g HotkeyGroup) Summary { return g.CmdsPerGrant }, func(f *costFits) *Line { return f.grantCmds }},
		} {
			p("%s:\n\n%s fit |\n%s---|\n", t.title, head, sep)
			for _, lib := range libs {
				cells := make([]string, len(ws))
				found := false
				for i, x := range ws {
					cells[i] = "–"
					for _, g := range c.Grant {
						if g.Lib == lib && g.W == x {
							cells[i], found = fmtSum(t.val(g), len(g.Runs)), true
						}
					}
				}
				if !found {
					continue
				}
				fit := "–"
				if l := t.fit(fits[lib]); l != nil {
					fit = fmt.Sprintf("%s (worst %.0f%%)", l.String("W"), 100*l.MaxRelDev)
				}
				p("| %s | %s | %s |\n", lib, strings.Join(cells, " | "), fit)
			}
			p("\n")
		}
	}

	if len(c.Held) > 0 {
		p("### Held locks\n\n")
		p("One Client holds %d locks idle, their TTL (dlock: `WithWatchdogTimeout`, rueidislock: `KeyValidity`) %s s, renewed by the library every *period*; Redis over %s s, divided by locks × periods. *Calls per period* counts script calls (EVALSHA) when any ran, else commands: dlock renews the holds of a Client in batched script calls (up to 500 locks each), rueidislock each lock on its own. Libraries without a watchdog (redsync, redislock, spin) hold for a fixed TTL and cost nothing while held, until the app extends them. (d) has dlock's same figure for the many more locks it holds with the 3 s watchdog.\n\n", c.Config.Held, fmtNum(c.Config.HeldTTLS), fmtNum(c.Config.HeldForS))
		p("| lib | period s | calls per period | cmds per lock per period | Redis CPU µs per lock per period | µs per lock per second | keys before / after | top commands per period |\n|---|---|---|---|---|---|---|---|\n")
		for _, h := range c.Held {
			if h.Error != "" {
				p("| %s | %s | error: %s | | | | | |\n", h.Lib, fmtNum(h.RenewalS), h.Error)
				continue
			}
			periods := h.WindowS / h.RenewalS
			per := map[string]int64{}
			for k, v := range h.CommandStats {
				per[k] = int64(float64(v)/periods + 0.5)
			}
			p("| %s | %s | %s | %s | %s | %s | %d / %d | %s |\n", h.Lib, fmtNum(h.RenewalS), fmtNum(h.CallsPerPeriod), fmtNum(h.CmdsPerLockPeriod), fmtNum(h.CPUPerLockPeriodUs), fmtNum(h.CPUPerLockSecUs), h.KeysBefore, h.KeysAfter, topCommands(per, 0, 3))
		}
		p("\n")
	}

	if len(c.Waiting) > 0 {
		p("### Waiting processes\n\n")
		p("One Client holds a key (each library's default hold: dlock's 30 s watchdog, the peers' TTLs of (b), rueidislock extending its 5 s validity every 2.5 s) while P other Clients (one process each) wait on it, nothing granted; Redis over %s s, after the waiters have had 0.5 s to start waiting, per waiting process per second. Those per-P figures include what Redis does anyway (its cron, about 1 ms/s here) and the holder's renewals; the fit over P separates them: its slope is the cost of one more waiting process. Polling peers can saturate Redis (or the 2 cores) at the larger P, which bends their line down: read their slope as a lower bound. dlock's waiters are woken by pub/sub and re-check every 3 s on their own; rueidislock's adapter restarts a wait after 2.5 s (see Libraries), one extra attempt each time.\n\n", fmtNum(c.Config.WaitForS))
		head, sep := "| lib |", "|---|"
		for _, x := range c.Config.P {
			head += fmt.Sprintf(" P=%d µs/s per process | P=%d cmds/s per process |", x, x)
			sep += "---|---|"
		}
		p("%s fit: total µs/s |\n%s---|\n", head, sep)
		for _, lib := range libs {
			var cells []string
			found := false
			for _, x := range c.Config.P {
				i := slices.IndexFunc(c.Waiting, func(w CostWaitRun) bool { return w.Lib == lib && w.P == x })
				switch {
				case i < 0:
					cells = append(cells, "–", "–")
				case c.Waiting[i].Error != "":
					cells = append(cells, "error: "+c.Waiting[i].Error, "")
					found = true
				default:
					w := c.Waiting[i]
					cpu := fmtNum(w.CPUPerProcSecUs)
					if w.Granted > 0 {
						cpu += fmt.Sprintf(" (**invalid: %d granted**)", w.Granted)
					}
					cells = append(cells, cpu, fmtNum(w.CmdsPerProcSec))
					found = true
				}
			}
			if !found {
				continue
			}
			fit := "–"
			if l := fits[lib].waitCPU; l != nil {
				fit = l.String("P")
			}
			p("| %s | %s | %s |\n", lib, strings.Join(cells, " | "), fit)
		}
		p("\n")
	}
}
