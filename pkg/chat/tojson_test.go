package chat

import (
	"math"
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/kvgate/kvgate/pkg/openai"
)

// libraryRender renders src with the library as it is (no renamed filters).
func libraryRender(t testing.TB, src string, vars map[string]jinja.Value) (string, error) {
	t.Helper()
	tmpl, err := jinja.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl.RenderValues(vars)
}

// tojsonValues are hard inputs for tojson: every escape, invalid UTF-8, float forms, nesting,
// and the values that print as null.
func tojsonValues(t testing.TB) map[string]jinja.Value {
	t.Helper()
	vals := map[string]jinja.Value{
		"none":      jinja.None(),
		"undefined": jinja.Undefined(),
		"callable":  rangeValue,
		"true":      jinja.NewBool(true),
		"false":     jinja.NewBool(false),
		"int":       jinja.NewInt(-9223372036854775808),
		"empty":     jinja.NewString(""),
		"invalid":   jinja.NewString("a\xffb\xed\xa0\x80c\xe2\x82"),
		"unicode":   jinja.NewString("é\u2028\u2029😀\ufffd\u00a0<>&'\x7f"),
	}
	var controls []byte
	for c := range 0x20 {
		controls = append(controls, byte(c), 'x')
	}
	vals["controls"] = jinja.NewString(string(controls) + `"\/`)
	for name, f := range map[string]float64{
		"f-zero": math.Copysign(0, -1), "f-1e16": 1e16, "f-below-1e16": 9999999999999998, "f-1e-4": 1e-4,
		"f-below-1e-4": 9.99e-5, "f-int": 100, "f-frac": 1.5, "f-max": math.MaxFloat64, "f-tiny": 5e-324,
		"f-nan": math.NaN(), "f-inf": math.Inf(1), "f-ninf": math.Inf(-1),
	} {
		vals[name] = jinja.NewFloat(f)
	}
	for name, src := range map[string]string{
		"nested":  `{"a": [1, 2.50, {"b": null, "c": true, "": {}}, [], "x\ny"], "d\u00e9": {"e": [[[]]]}, "a2": 1e400}`,
		"dup":     `{"k": 1, "j": 2, "k": 3}`,
		"escapes": `["\u0000\u001f\ud83d\ude00\u00e9\/\"\\", "\ud800"]`,
	} {
		v, err := decodeJSON([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		vals[name] = v
	}
	deep := jinja.NewList(nil)
	cur := deep
	for range 40 { // deeper than the ancestors array
		next := jinja.NewList(nil)
		cur.AsList().Append(next)
		cur = next
	}
	vals["deep"] = deep
	shared := jinja.NewList([]jinja.Value{jinja.NewInt(1)})
	vals["shared"] = jinja.NewList([]jinja.Value{shared, shared, jinja.NewList([]jinja.Value{shared})})
	return vals
}

// TestTojson compares the private tojson filter with the library's on hard values, with the
// default arguments (encoded by the filter itself) and with arguments (handed to the
// library), including the errors.
func TestTojson(t *testing.T) {
	for name, v := range tojsonValues(t) {
		want, werr := libraryRender(t, "{{ v | tojson }}", map[string]jinja.Value{"v": v})
		got, gerr := tojsonFilter([]jinja.Value{v}, nil)
		if werr != nil || gerr != nil || got.AsString() != want {
			t.Errorf("%s: got %q, %v; want %q, %v", name, softStr(got), gerr, want, werr)
		}
	}
	cyclic := jinja.NewList(nil)
	cyclic.AsList().Append(jinja.NewList([]jinja.Value{cyclic}))
	cyclicDict := jinja.NewDict()
	cyclicDict.AsDict().Set("self", jinja.NewList([]jinja.Value{jinja.NewInt(1), cyclicDict}))
	for name, v := range map[string]jinja.Value{"cyclic-list": cyclic, "cyclic-dict": cyclicDict} {
		_, werr := libraryRender(t, "{{ v | tojson }}", map[string]jinja.Value{"v": v})
		_, gerr := tojsonFilter([]jinja.Value{v}, nil)
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Errorf("%s: got error %v, want %v", name, gerr, werr)
		}
	}
	v := tojsonValues(t)["nested"]
	for _, call := range []struct {
		src    string
		args   []jinja.Value
		kwargs map[string]jinja.Value
	}{
		{"tojson(indent=2)", nil, map[string]jinja.Value{"indent": jinja.NewInt(2)}},
		{"tojson(indent='\\t', sort_keys=true)", nil, map[string]jinja.Value{"indent": jinja.NewString("\t"), "sort_keys": jinja.NewBool(true)}},
		{"tojson(true)", []jinja.Value{jinja.NewBool(true)}, nil},
		{"tojson(false, none, [',', ':'])", []jinja.Value{jinja.NewBool(false), jinja.None(), jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})}, nil},
		{"tojson(separators=[',', ':'], ensure_ascii=true)", nil, map[string]jinja.Value{"separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")}), "ensure_ascii": jinja.NewBool(true)}},
		{"tojson(separators=1)", nil, map[string]jinja.Value{"separators": jinja.NewInt(1)}},
		{"tojson(indent=nothing)", nil, map[string]jinja.Value{"indent": jinja.Undefined()}},
	} {
		want, werr := libraryRender(t, "{{ v | "+call.src+" }}", map[string]jinja.Value{"v": v})
		got, gerr := tojsonFilter(append([]jinja.Value{v}, call.args...), call.kwargs)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() || werr == nil && got.AsString() != want {
			t.Errorf("%s: got %q, %v; want %q, %v", call.src, softStr(got), gerr, want, werr)
		}
	}
}

func TestRewriteTojson(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"{{ x|tojson }}{{ x | tojson(indent=2) }}", "{{ x|__kvgate_tojson }}{{ x | __kvgate_tojson(indent=2) }}"},
		{"{% filter tojson %}a{% endfilter %}", "{% filter __kvgate_tojson %}a{% endfilter %}"},
		{"{{ tojson }}{{ '|tojson' }}{# |tojson #}{% raw %}{{ x|tojson }}{% endraw %}", "{{ tojson }}{{ '|tojson' }}{# |tojson #}{% raw %}{{ x|tojson }}{% endraw %}"},
	} {
		if got := rewriteTojson(tt.src); got != tt.want {
			t.Errorf("rewriteTojson(%q): got %q, want %q", tt.src, got, tt.want)
		}
	}
}

// BenchmarkTojson is `tool | tojson` on the three tools of the bench conversation (what the
// Qwen3 template does on every request with tools): the library's filter, and the private
// one that replaces it.
func BenchmarkTojson(b *testing.B) {
	var body []byte
	for _, c := range readConversations(b) {
		if c.ID == "bench-10msg-4k" {
			body = c.Request
		}
	}
	req, perr := openai.ParseChat(body, openai.Limits{})
	if perr != nil {
		b.Fatal(perr.Message)
	}
	tools, _, err := toolDicts(req.Tools, nil)
	if err != nil {
		b.Fatal(err.Message)
	}
	vars := map[string]jinja.Value{"tools": tools, tojsonFilterName: tojsonValue}
	const src = "{% for tool in tools %}{{ tool | tojson }}{% endfor %}"
	for name, src := range map[string]string{"library": src, "kvgate": rewriteTojson(src)} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := tmpl.RenderValues(vars)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if _, err := tmpl.RenderValues(vars); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
