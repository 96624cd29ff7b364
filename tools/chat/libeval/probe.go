package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// runProbes renders probe/probes.jsonl (written by probe/ref.py with gen.py's Jinja2
// environment) with both libraries and prints a markdown table.
func runProbes(path string) {
	f := must(os.Open(path))
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	q := func(s string) string {
		s = fmt.Sprintf("%q", s)
		s = strings.ReplaceAll(s, "|", "\\|")
		if len(s) > 90 {
			s = s[:90] + "…"
		}
		return "`" + s + "`"
	}
	fmt.Println("| probe | Jinja2 (gen.py env) | ardanlabs v1.12.0 | gonja v2.9.1 |")
	fmt.Println("|---|---|---|---|")
	same := map[string]int{}
	n := 0
	for sc.Scan() {
		p := must(parseJSON(sc.Bytes(), true))
		n++
		rv := &renderVars{vals: map[string]*J{}}
		vs := p.get("vars")
		for _, k := range vs.Keys {
			rv.put(k, vs.Vals[k])
		}
		var want string
		wantErr := p.get("err") != nil
		if wantErr {
			want = "ERR " + p.get("err").S
		} else {
			want = p.get("ok").S
		}
		cells := []string{}
		for _, lib := range []struct {
			name string
			c    func(string) (renderer, error)
		}{{"ardanlabs", compileArdan}, {"gonja", compileGonja}} {
			r, err := lib.c(p.get("tpl").S)
			out := ""
			if err == nil {
				out, err = r.render(rv)
			}
			switch {
			case err != nil && wantErr:
				same[lib.name]++
				cells = append(cells, "✓ (errors)")
			case err != nil:
				e := err.Error()
				if i := strings.LastIndex(e, ": "); i >= 0 && len(e) > 160 {
					e = e[i+2:]
				}
				cells = append(cells, "ERR "+q(e))
			case wantErr:
				cells = append(cells, "renders "+q(out))
			case out == want:
				same[lib.name]++
				cells = append(cells, "✓")
			default:
				cells = append(cells, q(out))
			}
		}
		fmt.Printf("| %s | %s | %s | %s |\n", strings.ReplaceAll(p.get("name").S, "|", "\\|"), q(want), cells[0], cells[1])
	}
	fmt.Printf("\nprobes matching Jinja2: ardanlabs %d/%d, gonja %d/%d\n", same["ardanlabs"], n, same["gonja"], n)
}
