// Command libeval compares the two Go Jinja libraries a chat renderer could use,
// github.com/ardanlabs/jinja (the one pkg/chat uses) and github.com/nikolalohinski/gonja/v2,
// as shipped, on kvgate's golden chat-template cases: the 13 golden templates × 56 requests
// of pkg/chat/testdata (prompt bytes) and the 95 sweep templates (SHA-256 prefixes), with the
// template variables built as pkg/chat builds them but none of pkg/chat's fixes to the library.
// It also times one realistic render (Qwen3, bench-10msg-4k) with both and renders the
// feature probes of probe/probes.py (reference: probe/ref.py, gen.py's Jinja2 environment).
//
// It is a module of its own so that gonja never enters kvgate's go.mod. Run from here, after
// `make test` has fetched the templates into .cache:
//
//	go run . -root ../../..            # tables (docs/chat.md, "Library choice")
//	go run . -root ../../.. -bench     # render and compile timings
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

var (
	root   = flag.String("root", "../../..", "kvgate checkout (read-only)")
	repeat = flag.Int("repeat", 100, "renders per case; exact only if all renders are exact")
)

type kv struct {
	k string
	v *J
}

type tmpl struct {
	name    string
	src     string
	special []kv
	sweep   bool
}

type golden struct {
	ID     string  `json:"id"`
	Format string  `json:"format"`
	Prompt *string `json:"prompt"`
	Error  *string `json:"error"`
	Exact  bool    `json:"exact"`
	hash   string  // sweep: expected sha256[:16], or "" when an error is expected
}

type conv struct {
	id  string
	req *J
}

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return v
}

func readJSON(path string) *J {
	return must(parseJSON(must(os.ReadFile(path)), true))
}

func content(v *J) *J {
	if v != nil && v.K == jObj {
		return v.get("content")
	}
	return v
}

var specialKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

func specialTokens(cfg *J) []kv {
	var out []kv
	for _, k := range specialKeys {
		if v := content(cfg.get(k)); !isNone(v) {
			out = append(out, kv{k, v})
		}
	}
	if a := cfg.get("additional_special_tokens"); !isNone(a) {
		l := jarr()
		for _, x := range a.Arr {
			if c := content(x); !isNone(c) {
				l.Arr = append(l.Arr, c)
			}
		}
		out = append(out, kv{"additional_special_tokens", l})
	}
	if e := cfg.get("extra_special_tokens"); e != nil && e.K == jObj {
		for _, k := range e.Keys {
			if c := content(e.Vals[k]); !isNone(c) {
				out = append(out, kv{k, c})
			}
		}
	}
	return out
}

func loadTemplates() []tmpl {
	spec := readJSON(filepath.Join(*root, "tools/chat/templates.json"))
	var out []tmpl
	for _, t := range spec.get("local").Arr {
		cfg := readJSON(filepath.Join(*root, ".cache/tokenizers", t.get("tokenizer").S, "tokenizer_config.json"))
		src := cfg.get("chat_template")
		if src.K == jArr {
			for _, x := range src.Arr {
				if x.get("name").S == "default" {
					src = x.get("template")
				}
			}
		}
		out = append(out, tmpl{name: t.get("name").S, src: src.S, special: specialTokens(cfg)})
	}
	for _, t := range spec.get("ollama").Arr {
		var sp []kv
		st := t.get("special_tokens")
		for _, k := range st.Keys {
			sp = append(sp, kv{k, st.Vals[k]})
		}
		src := string(must(os.ReadFile(filepath.Join(*root, ".cache/templates", t.get("name").S+".jinja"))))
		out = append(out, tmpl{name: t.get("name").S, src: src, special: sp})
	}
	return out
}

func loadSweep() ([]tmpl, map[string]map[string]golden) {
	dir := filepath.Join(*root, ".cache/templates/sweep")
	ents := must(os.ReadDir(dir))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	sp := []kv{{"bos_token", jstr("<s>")}, {"eos_token", jstr("</s>")}}
	var out []tmpl
	for _, n := range names {
		src := string(must(os.ReadFile(filepath.Join(dir, n))))
		out = append(out, tmpl{name: strings.TrimSuffix(n, ".jinja"), src: src, special: sp, sweep: true})
	}
	gold := map[string]map[string]golden{}
	f := must(os.Open(filepath.Join(*root, "pkg/chat/testdata/golden/sweep.jsonl")))
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var l struct {
			Template string            `json:"template"`
			Format   string            `json:"format"`
			Cases    map[string]string `json:"cases"`
		}
		must(0, json.Unmarshal(sc.Bytes(), &l))
		m := map[string]golden{}
		for id, h := range l.Cases {
			g := golden{ID: id, Format: l.Format}
			if strings.HasPrefix(h, "!") {
				msg := h[1:]
				g.Error = &msg
				g.Exact = msg != ""
			} else {
				g.hash = h
			}
			m[id] = g
		}
		gold[l.Template] = m
	}
	return out, gold
}

func loadGolden(name string) map[string]golden {
	f := must(os.Open(filepath.Join(*root, "pkg/chat/testdata/golden", name+".jsonl")))
	defer f.Close()
	out := map[string]golden{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var g golden
		must(0, json.Unmarshal(sc.Bytes(), &g))
		out[g.ID] = g
	}
	return out
}

func loadConvs() []conv {
	f := must(os.Open(filepath.Join(*root, "pkg/chat/testdata/conversations.jsonl")))
	defer f.Close()
	var out []conv
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		c := must(parseJSON(sc.Bytes(), true))
		out = append(out, conv{id: c.get("id").S, req: c.get("request")})
	}
	return out
}

// ---------------------------------------------------------------- comparison

type outcome int

const (
	oExact       outcome = iota // prompt case, byte-identical
	oMismatch                   // prompt case, different bytes
	oError                      // prompt case, compile/render error
	oRefErrBoth                 // reference raised in/after render; library errored too
	oRefErrOK                   // reference raised; library rendered a prompt
	oRequestRule                // rejected before rendering (gen.py request rules): no library involved
)

type result struct {
	Template string `json:"template"`
	ID       string `json:"id"`
	Lib      string `json:"lib"`
	Outcome  string `json:"outcome"`
	Err      string `json:"err,omitempty"`
	WantErr  string `json:"want_err,omitempty"`
	MsgMatch bool   `json:"msg_contains_ref,omitempty"`
	At       int    `json:"diff_at,omitempty"`
	Got      string `json:"got,omitempty"`
	Want     string `json:"want,omitempty"`
	Compile  bool   `json:"compile_error,omitempty"`
	Nondet   bool   `json:"nondeterministic,omitempty"`
}

var outcomeNames = []string{"exact", "mismatch", "error", "ref-error+lib-error", "ref-error+lib-rendered", "request-rule"}

// headTail keeps the start and the end of a long error message (gonja nests them).
func headTail(s string) string {
	if len(s) <= 700 {
		return s
	}
	return s[:200] + " … " + s[len(s)-500:]
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func compare(t tmpl, g golden, lib string, r renderer, compileErr error, rv *renderVars, buildErr error) result {
	res := result{Template: t.name, ID: g.ID, Lib: lib}
	set := func(o outcome) result { res.Outcome = outcomeNames[o]; return res }
	wantErr := g.Error != nil
	if wantErr {
		res.WantErr = *g.Error
	}
	if buildErr != nil {
		var rj *rejected
		if !errors.As(buildErr, &rj) {
			panic(buildErr)
		}
		if !wantErr {
			res.Err = "PORT BUG: rejected but golden has a prompt: " + buildErr.Error()
			return set(oError)
		}
		return set(oRequestRule)
	}
	var out string
	var err error
	if compileErr != nil {
		err, res.Compile = compileErr, true
	} else {
		out, err = r.render(rv)
		if err == nil {
			out, err = finishCFM(rv, out)
		}
		// Render again: a case is exact only if every render is (gonja's |items on a Go
		// map iterates in random order).
		for k := 1; k < *repeat && err == nil; k++ {
			o2, e2 := r.render(rv)
			if e2 == nil {
				o2, e2 = finishCFM(rv, o2)
			}
			if e2 != nil || o2 != out {
				res.Nondet = true
				if g.Prompt != nil && out == *g.Prompt {
					out = o2 // report the non-matching render
				}
				break
			}
		}
	}
	if wantErr {
		if err != nil {
			res.Err = headTail(err.Error())
			res.MsgMatch = strings.Contains(err.Error(), *g.Error)
			return set(oRefErrBoth)
		}
		res.Got = clip(out, 200)
		return set(oRefErrOK)
	}
	if err != nil {
		res.Err = headTail(err.Error())
		return set(oError)
	}
	if res.Nondet { // not reliably exact: counted as a mismatch
		res.Got = clip(out, 300)
		return set(oMismatch)
	}
	var want string
	if t.sweep {
		sum := sha256.Sum256([]byte(out))
		if hex.EncodeToString(sum[:])[:16] == g.hash {
			return set(oExact)
		}
		res.Got = clip(out, 300)
		return set(oMismatch)
	}
	want = *g.Prompt
	if out == want {
		return set(oExact)
	}
	i := 0
	for i < len(out) && i < len(want) && out[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	res.At, res.Got, res.Want = i, clip(out[lo:], 120), clip(want[lo:], 120)
	return set(oMismatch)
}

type counts [6]int

func main() {
	dump := flag.Bool("dumpvars", false, "print the built template variables as JSON lines (for the gen.py cross-check) and exit")
	bench := flag.Bool("bench", false, "benchmark bench-10msg-4k with qwen3")
	benchRuns := flag.Int("runs", 15, "testing.Benchmark repetitions (median reported)")
	details := flag.String("details", os.DevNull, "write per-case results (JSON lines) to this file")
	one := flag.String("one", "", "template/id: print both renders")
	probe := flag.String("probe", "", "render a probes.jsonl feature file with both libraries")
	sweepF := flag.Bool("sweep", true, "also run the 95 sweep templates")
	flag.Parse()

	tmpls := loadTemplates()
	convs := loadConvs()

	if *dump {
		w := bufio.NewWriter(os.Stdout)
		defer w.Flush()
		for _, t := range tmpls {
			gold := loadGolden(t.name)
			names := templateNames(t.src)
			for _, c := range convs {
				rv, err := buildVars(t.src, names, t.special, c.req, gold[c.id].Format)
				var b strings.Builder
				if err != nil {
					fmt.Fprintf(&b, `{"template":%q,"id":%q,"rejected":true}`, t.name, c.id)
				} else {
					fmt.Fprintf(&b, `{"template":%q,"id":%q,"vars":`, t.name, c.id)
					rv.asObj().encode(&b)
					b.WriteString("}")
				}
				fmt.Fprintln(w, b.String())
			}
		}
		return
	}
	if *one != "" {
		runOne(*one, convs, tmpls)
		return
	}
	if *probe != "" {
		runProbes(*probe)
		return
	}
	if *bench {
		runBench(tmpls, convs, *benchRuns)
		return
	}

	df := must(os.Create(*details))
	defer df.Close()
	enc := json.NewEncoder(df)
	enc.SetEscapeHTML(false)

	libs := []struct {
		name    string
		compile func(string) (renderer, error)
	}{{"ardanlabs", compileArdan}, {"gonja", compileGonja}, {"gonja+pytojson", compileGonjaPy}}

	run := func(set []tmpl, goldOf func(string) map[string]golden) (map[string]map[string]*counts, map[string]map[string]string) {
		tab := map[string]map[string]*counts{}
		compileErrs := map[string]map[string]string{}
		for _, t := range set {
			gold := goldOf(t.name)
			names := templateNames(t.src)
			tab[t.name] = map[string]*counts{}
			compileErrs[t.name] = map[string]string{}
			for _, lib := range libs {
				r, cerr := lib.compile(t.src)
				if cerr != nil {
					compileErrs[t.name][lib.name] = headTail(cerr.Error())
				}
				cn := &counts{}
				tab[t.name][lib.name] = cn
				for _, c := range convs {
					g, ok := gold[c.id]
					if !ok {
						panic("no golden " + t.name + "/" + c.id)
					}
					rv, berr := buildVars(t.src, names, t.special, c.req, g.Format)
					res := compare(t, g, lib.name, r, cerr, rv, berr)
					for i, n := range outcomeNames {
						if n == res.Outcome {
							cn[i]++
						}
					}
					must(0, enc.Encode(res))
				}
			}
		}
		return tab, compileErrs
	}

	printTable := func(title string, set []tmpl, tab map[string]map[string]*counts, cerrs map[string]map[string]string, perRow bool) {
		fmt.Printf("\n## %s\n\n", title)
		if perRow {
			fmt.Println("| template | prompts | A exact | A mismatch | A error | B exact | B mismatch | B error | ref raised | A also err | B also err | request-rule (n/a) |")
			fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
		}
		var tA, tB counts
		for _, t := range set {
			a, b := tab[t.name]["ardanlabs"], tab[t.name]["gonja"]
			for i := range a {
				tA[i] += a[i]
				tB[i] += b[i]
			}
			if perRow {
				note := ""
				for _, l := range []string{"ardanlabs", "gonja"} {
					if e, ok := cerrs[t.name][l]; ok {
						note += fmt.Sprintf(" (%s: does not compile)", l)
						_ = e
					}
				}
				fmt.Printf("| %s%s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", t.name, note,
					a[0]+a[1]+a[2], a[0], a[1], a[2], b[0], b[1], b[2], a[3]+a[4], a[3], b[3], a[5])
			}
		}
		fmt.Printf("| **total** | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			tA[0]+tA[1]+tA[2], tA[0], tA[1], tA[2], tB[0], tB[1], tB[2], tA[3]+tA[4], tA[3], tB[3], tA[5])
		nA, nB := 0, 0
		for _, t := range set {
			if _, ok := cerrs[t.name]["ardanlabs"]; ok {
				nA++
			}
			if _, ok := cerrs[t.name]["gonja"]; ok {
				nB++
			}
		}
		var tP counts
		for _, t := range set {
			for i, x := range tab[t.name]["gonja+pytojson"] {
				tP[i] += x
			}
		}
		fmt.Printf("\nsupplementary, gonja with tojson replaced by a json.dumps port (not as shipped): exact %d, mismatch %d, error %d; ref raised & lib errored %d\n", tP[0], tP[1], tP[2], tP[3])
		fmt.Printf("\ntemplates that do not compile: ardanlabs %d/%d, gonja %d/%d\n", nA, len(set), nB, len(set))
		for _, t := range set {
			for _, l := range []string{"ardanlabs", "gonja"} {
				if e, ok := cerrs[t.name][l]; ok && perRow {
					fmt.Printf("- %s / %s: %s\n", t.name, l, strings.ReplaceAll(e, "\n", " "))
				}
			}
		}
	}

	tab, cerrs := run(tmpls, loadGolden)
	printTable("golden templates (13 × 56)", tmpls, tab, cerrs, true)
	if *sweepF {
		sw, sgold := loadSweep()
		stab, scerrs := run(sw, func(n string) map[string]golden { return sgold[n] })
		printTable("sweep templates (95 × 56, golden = sha256 prefix)", sw, stab, scerrs, false)
		// per-template summary line for the sweep
		fmt.Println("\nsweep per template (A exact/mismatch/error | B exact/mismatch/error):")
		for _, t := range sw {
			a, b := stab[t.name]["ardanlabs"], stab[t.name]["gonja"]
			fmt.Printf("  %-32s A %2d/%2d/%2d  B %2d/%2d/%2d", t.name, a[0], a[1], a[2], b[0], b[1], b[2])
			for _, l := range []string{"ardanlabs", "gonja"} {
				if _, ok := scerrs[t.name][l]; ok {
					fmt.Printf("  [%s: compile error]", l)
				}
			}
			fmt.Println()
		}
	}
}
