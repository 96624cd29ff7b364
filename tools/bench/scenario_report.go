package main

import (
	"fmt"
	"math"
	"strings"
)

// Targets of issue 21 for the scenarios, each against the clean row of the same configuration
// (medians of the runs, side by side in one bench).
const (
	raceHitTarget  = 0.97 // race: hit rate ≥ 0.97 × clean
	raceTTFTTarget = 1.3  // race: TTFT mean ≤ 1.3 × clean
	lateHitTarget  = 0.95 // late: hit rate ≥ 0.95 × clean
	lateDupTarget  = 0.05 // late: blocks on more than one worker at the end ≤ 5% of clean's blocks
	cleanSpreadMax = 0.02 // every clean row: min–max hit spread ≤ 2 points
)

// steadyRows returns the rows of steady fleets (no scenario).
func steadyRows(results []result) []result {
	var out []result
	for _, r := range results {
		if r.Scenario == "" && r.Fleet == "" && r.Workload != workloadOverload {
			out = append(out, r)
		}
	}
	return out
}

// cleanRow returns the steady row of r's configuration on the uniform workload at r's gateway
// count.
func cleanRow(results []result, r result) (result, bool) {
	for _, c := range results {
		if c.Scenario == "" && c.Workload == "uniform" && c.Policy == r.Policy && c.Index == r.Index && c.Variant == r.Variant && c.Gateways == r.Gateways {
			return c, true
		}
	}
	return result{}, false
}

// ratio formats a/b as "0.97×" ("n/a" without b).
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// scenarioSection renders the scenarios' table and, from its numbers, each target met or missed.
func scenarioSection(o *options, results []result) string {
	var rows []result
	for _, r := range results {
		if r.Scenario != "" {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("### Fleets that are not steady (issue 21)\n\n")
	p("The uniform workload at 1 gateway, with the fleet changing as in production: **race** starts one simulator, then the gateway and, %v after it, the other %d, and starts the load when the gateway's `/readiness` says 200; **late** starts with %d simulators and lists the last in the gateway's config file %v into the load (a scale-up or a discovery); **leave** stops listing one %v into the load (it drains). Each row against the clean row of the same configuration above; *duplicated* is the blocks the gateway's event index holds on more than one worker at the end of the run (`/workers`: index_blocks − index_keys), as a share of the clean run's cached blocks.\n\n",
		o.raceDelay, o.sims-1, o.sims-1, o.lateAfter, o.leaveAfter)
	p("| policy | index | scenario | runs | hit rate | × clean | TTFT mean | × clean | TTFT p95 | × clean | duplicated blocks | of clean's blocks |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		c, ok := cleanRow(results, r)
		hr, tr, pr, dr := "n/a", "n/a", "n/a", "n/a"
		if ok {
			hr, tr, pr = ratio(r.hit(), c.hit()), ratio(r.TTFTms.Mean, c.TTFTms.Mean), ratio(r.TTFTms.P95, c.TTFTms.P95)
			if c.IndexBlocks > 0 {
				dr = pct(float64(r.duplicated()) / float64(c.IndexBlocks))
			}
		}
		dup := fmt.Sprint(r.duplicated())
		if s := spreadPart(r, func(s *runSpread) [2]float64 { return s.Duplicated }); s != nil {
			dup = fmt.Sprintf("%d (%.0f–%.0f)", r.duplicated(), s[0], s[1])
		}
		name := r.Policy
		if r.Variant != "" {
			name += " (" + r.Variant + ")"
		}
		p("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, r.Index, r.Scenario, max(r.Runs, 1), hitCell(r), hr,
			ttftCell(r.TTFTms.Mean, spreadPart(r, func(s *runSpread) [2]float64 { return s.TTFTMean })), tr,
			ttftCell(r.TTFTms.P95, spreadPart(r, func(s *runSpread) [2]float64 { return s.TTFTP95 })), pr, dup, dr)
	}
	p("\n%s\n\n", targetsParagraph(results, rows))
	return b.String()
}

// targetsParagraph says, from the numbers, which of issue 21's targets each row meets.
func targetsParagraph(results, rows []result) string {
	var lines []string
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	lateLeastLoad := func() (result, bool) {
		for _, r := range rows {
			if r.Scenario == scenarioLate && r.Policy == "least_load" {
				return r, true
			}
		}
		return result{}, false
	}
	for _, r := range rows {
		c, ok := cleanRow(results, r)
		if !ok {
			continue
		}
		name := r.Policy + " " + r.Index
		switch r.Scenario {
		case scenarioRace:
			h, t := r.hit()/c.hit(), r.TTFTms.Mean/c.TTFTms.Mean
			lines = append(lines, fmt.Sprintf("%s race: hit %.3f × clean (target ≥ %.2f: %s), TTFT mean %.2f × (target ≤ %.1f: %s).",
				name, h, raceHitTarget, verdict(h >= raceHitTarget), t, raceTTFTTarget, verdict(t <= raceTTFTTarget)))
		case scenarioLate:
			h := r.hit() / c.hit()
			line := fmt.Sprintf("%s late: hit %.3f × clean (target ≥ %.2f: %s)", name, h, lateHitTarget, verdict(h >= lateHitTarget))
			if ll, ok := lateLeastLoad(); ok && r.Policy != "least_load" {
				line += fmt.Sprintf(", TTFT p95 %s against least_load's %s in the same scenario (target no worse: %s)",
					fmtMS(r.TTFTms.P95), fmtMS(ll.TTFTms.P95), verdict(r.TTFTms.P95 <= ll.TTFTms.P95))
			}
			if c.IndexBlocks > 0 {
				d := float64(r.duplicated()) / float64(c.IndexBlocks)
				line += fmt.Sprintf(", duplicated blocks %s of clean's (target ≤ %s: %s)", pct(d), pct(lateDupTarget), verdict(d <= lateDupTarget))
			}
			lines = append(lines, line+".")
		}
	}
	for _, r := range steadyRows(results) {
		if r.Spread != nil && r.Workload == "uniform" {
			w := r.Spread.Hit[1] - r.Spread.Hit[0]
			if w > cleanSpreadMax {
				lines = append(lines, fmt.Sprintf("Clean %s %s at %d gateway%s: hit spread %.1f points over its runs (target ≤ %.0f: **missed**).",
					r.Policy, r.Index, r.Gateways, plural(r.Gateways), 100*w, 100*cleanSpreadMax))
			}
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "Against issue 21's targets: " + strings.Join(lines, " ")
}
