package chat

import (
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// TestRewriteBigOperators checks the big variant's source; what it renders is checked
// against Jinja2 by TestProbes (bigint-equal, bigint-filters, op-bigint-*).
func TestRewriteBigOperators(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{{ a == b }}{{ a != b }}", "{{ (a )|__kvgate_eq( b )}}{{ (a )|__kvgate_ne( b )}}"},
		{"{% if a in b and c not in d %}", "{% if (a )|__kvgate_in( b )and (c )|__kvgate_notin( d )%}"},
		{"{{ a + 1 == b }}", "{{ ((a )|__kvgate_add( 1 ))|__kvgate_eq( b )}}"},
		{"{% for x in xs if x == y %}", "{% for x in (xs )|__kvgate_iter if (x )|__kvgate_eq( y )%}"},
		{"{{ a is eq b }}{{ a is not eq b }}{{ a is equalto(b) }}{{ a is ne b.c }}{{ a is in [1] }}{{ a is not in b }}",
			"{{ (a )|__kvgate_eq(b )}}{{ (a )|__kvgate_ne(b )}}{{ (a )|__kvgate_eq(b) }}{{ (a )|__kvgate_ne(b.c )}}{{ (a )|__kvgate_in([1] )}}{{ (a )|__kvgate_notin(b )}}"},
		// Chains are left to the library, as are tests it has no filter for.
		{"{% if a == b == c %}{% if a < b == c %}{{ a is odd }}{{ a is divisibleby 3 }}",
			"{% if (a )|__kvgate_chain('==', ( b ), '==', ( c ))%}{% if (a )|__kvgate_chain('<', ( b ), '==', ( c ))%}{{ a is odd }}{{ a is divisibleby 3 }}"},
	} {
		if got := rewriteBigOperators(c.in); got != c.want {
			t.Errorf("rewriteBigOperators(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		// The template's own compilation is not touched: its == stays the library's.
		if got := rewriteOperators(c.in); strings.Contains(got, eqFilterName) || strings.Contains(got, inFilterName+"(") {
			t.Errorf("rewriteOperators(%q) = %q: rewrites equality", c.in, got)
		}
	}
	if got, want := rewriteBigFilters("{{ x|int }}{{ x|round(2)|abs }}{{ y|sum(attribute='n')|max|min|float }}{{ 'int' }}"),
		"{{ x|__kvgate_int }}{{ x|__kvgate_round(2)|__kvgate_abs }}{{ y|__kvgate_sum(attribute='n')|__kvgate_max|__kvgate_min|__kvgate_float }}{{ 'int' }}"; got != want {
		t.Errorf("rewriteBigFilters:\n got %q\nwant %q", got, want)
	}
}

func TestDecodeJSONBig(t *testing.T) {
	for _, c := range []struct {
		in  string
		big bool
	}{
		{`{"a": 9223372036854775807, "b": -9223372036854775808, "c": 1e30, "d": "18446744073709551616"}`, false},
		{`{"a": [1, {"b": 9223372036854775808}]}`, true},
		{`-9223372036854775809`, true},
	} {
		_, big, err := decodeJSONBig([]byte(c.in))
		if err != nil || big != c.big {
			t.Errorf("decodeJSONBig(%s) = %v, %v; want %v", c.in, big, err, c.big)
		}
		// A pooled decoder does not carry the flag into the next value.
		if _, big, _ := decodeJSONBig([]byte(`1`)); big {
			t.Fatalf("after %s: a small value decoded as big", c.in)
		}
	}
	if _, big := loadsArgumentsBig([]byte(`"{\"x\": 99999999999999999999}"`)); !big {
		t.Errorf("loadsArgumentsBig: a big integer in string arguments not reported")
	}
}

func bigValue(t *testing.T, s string) jinja.Value {
	t.Helper()
	x, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatal(s)
	}
	return newBigInt(x)
}

func TestPyEqContains(t *testing.T) {
	v := bigValue(t, "18446744073709551615")
	w := bigValue(t, "18446744073709551615") // another value with the same digits
	edge := bigValue(t, "9223372036854775808")
	list := func(xs ...jinja.Value) jinja.Value { return jinja.NewList(xs) }
	for i, c := range []struct {
		a, b jinja.Value
		want bool
	}{
		{v, v, true}, {v, w, true}, {v, edge, false}, {v, jinja.NewInt(-1), false},
		{edge, jinja.NewFloat(9223372036854775808), true}, {v, jinja.NewFloat(18446744073709551616), false},
		{v, jinja.NewString(v.AsCallable().Name), false}, {v, jinja.None(), false}, {v, jinja.NewBool(true), false},
		{list(v, jinja.NewInt(1)), list(w, jinja.NewInt(1)), true}, {list(v), list(edge), false},
		{jinja.NewInt(3), jinja.NewFloat(3), true}, {jinja.NewString("a"), jinja.NewString("a"), true},
	} {
		if got := pyEq(c.a, c.b, 0); got != c.want {
			t.Errorf("case %d: pyEq(%v, %v) = %v, want %v", i, c.a, c.b, got, c.want)
		}
		if got := pyEq(c.b, c.a, 0); got != c.want {
			t.Errorf("case %d: pyEq is not symmetric", i)
		}
	}
	if ok, err := pyContains(list(jinja.NewInt(1), w), v); !ok || err != nil {
		t.Errorf("v in [1, w] = %v, %v", ok, err)
	}
	if _, err := pyContains(jinja.NewString("abc"), v); err == nil || !strings.HasPrefix(err.Error(), "TypeError") {
		t.Errorf("v in 'abc': %v, want a TypeError", err)
	}
	if _, err := pyContains(v, jinja.NewInt(1)); err == nil {
		t.Errorf("1 in v: no error")
	}
}

func TestBigRound(t *testing.T) {
	for _, c := range []struct {
		x    string
		n    int64
		want string
	}{
		{"18446744073709551615", -1, "18446744073709551620"}, // half: 1 odd, up
		{"18446744073709551625", -1, "18446744073709551620"}, // half: 2 even, down
		{"-18446744073709551625", -1, "-18446744073709551620"},
		{"-18446744073709551615", -1, "-18446744073709551620"},
		{"18446744073709551615", -19, "20000000000000000000"},
		{"18446744073709551615", -20, "0"},
		{"58446744073709551615", -20, "100000000000000000000"},
		{"18446744073709551615", -5000, "0"},
		{"18446744073709551615", 3, "18446744073709551615"},
	} {
		got, err := bigRoundFilter([]jinja.Value{bigValue(t, c.x), jinja.NewInt(c.n)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s := pyStr(got); s != c.want {
			t.Errorf("round(%s, %d) = %s, want %s", c.x, c.n, s, c.want)
		}
	}
}

// TestLibraryFilters: the private filters reach the library's own for other values, so the
// big variant renders them as the template does.
func TestLibraryFilters(t *testing.T) {
	fs, err := libraryFilters()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range bigFilterRenames {
		if f, ok := fs[r[0]]; !ok || f.AsCallable().Name != r[0] {
			t.Errorf("library filter %s not captured", r[0])
		}
	}
	got, err := bigIntFilter([]jinja.Value{jinja.NewString("0x1f"), jinja.NewInt(0), jinja.NewInt(16)}, nil)
	if err != nil || !got.IsInt() || got.AsInt() != 31 {
		t.Errorf("'0x1f'|int(0, 16) = %v, %v", got, err)
	}
}

// TestBigVariantLazy: a template's big variant is compiled only once a request holding a big
// integer arrives, also when the integer comes from the schema cache, and renders those
// requests exactly; other requests keep the template's own compilation.
func TestBigVariantLazy(t *testing.T) {
	src := "{% for t in tools or [] %}{{ t.function.parameters.properties.n.maximum == t.function.parameters.properties.n.maximum }}{% endfor %}" +
		"{% for m in messages %}{{ m.role == 'user' }}{% endfor %}"
	r, err := newRenderer(&modelFiles{templates: map[string]string{"default": src}}, Options{Now: func() time.Time { return goldenNow }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.defaultT.shares {
		t.Fatal("the test template must share schemas (to go through the schema cache)")
	}
	small := `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}}}]}`
	bigReq := strings.Replace(small, `"maximum": 5`, `"maximum": 18446744073709551615`, 1)
	if got, perr := r.RenderText(mustParse(t, small)); perr != nil || got != "TrueTrue" {
		t.Fatalf("small: %q %v", got, perr)
	}
	if r.defaultT.big.t != nil {
		t.Fatal("the big variant was compiled for a request without big integers")
	}
	var wg sync.WaitGroup
	for range 8 { // concurrent first uses compile once and agree; the second round hits the cache
		wg.Go(func() {
			for range 2 {
				if got, perr := r.RenderText(mustParse(t, bigReq)); perr != nil || got != "TrueTrue" {
					t.Errorf("big: %q %v", got, perr)
				}
			}
		})
	}
	wg.Wait()
	if r.defaultT.big.t == nil {
		t.Fatal("the big variant was not used")
	}
	if got, perr := r.RenderText(mustParse(t, small)); perr != nil || got != "TrueTrue" {
		t.Fatalf("small after big: %q %v", got, perr)
	}
}
