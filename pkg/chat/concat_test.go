package chat

import (
	"testing"

	"github.com/ardanlabs/jinja"

	"github.com/kvgate/kvgate/pkg/openai"
)

func TestRewriteConcat(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		// Split: a string literal first or second, only + at the top level.
		{"{{- '<s>' + m.role + '\\n' + m.content|trim + '</s>' -}}", "{{- '<s>' }}{{ (m.role )|__kvgate_cat}}{{ '\\n' }}{{ (m.content|trim )|__kvgate_cat}}{{ '</s>' -}}"},
		{"{{ messages[0].content + '\\n\\n' }}", "{{ (messages[0].content )|__kvgate_cat}}{{ '\\n\\n' }}"},
		{"{{ a + 'x' + (b + 1) + c.strip('\\n') + d | f(1, 2) + e[1:2] }}", "{{ (a )|__kvgate_cat}}{{ 'x' }}{{ ((b + 1) )|__kvgate_cat}}{{ (c.strip('\\n') )|__kvgate_cat}}{{ (d | f(1, 2) )|__kvgate_cat}}{{ (e[1:2] )|__kvgate_cat}}"},
		{"{% set x = 'a' + b %}{{ 'a' + b }}{# {{ 'a' + b }} #}", "{% set x = 'a' + b %}{{ 'a' }}{{ (b )|__kvgate_cat}}{# {{ 'a' + b }} #}"},
		// Kept: not provably a string chain, other operators, calls that may change values,
		// braces, delimiters in strings.
		{"{{ a + b + 'x' }}", "{{ a + b + 'x' }}"},
		{"{{ a + b }}", "{{ a + b }}"},
		{"{{ 'a' + b if c else d }}", "{{ 'a' + b if c else d }}"},
		{"{{ 'a' + b ~ c }}{{ 'a' + b - c }}{{ 'a' + b * 2 }}{{ 'a' + b == c }}{{ 'a' + b in c }}", "{{ 'a' + b ~ c }}{{ 'a' + b - c }}{{ 'a' + b * 2 }}{{ 'a' + b == c }}{{ 'a' + b in c }}"},
		{"{{ 'a' + m() }}{{ 'a' + l.append(1) }}{{ 'a' + loop.cycle(1, 2) }}{{ 'a' + f()() }}", "{{ 'a' + m() }}{{ 'a' + l.append(1) }}{{ 'a' + loop.cycle(1, 2) }}{{ 'a' + f()() }}"},
		{"{{ 'a' + {'k': 1}.k }}{{ '}}' + b }}{{ 'a' + -b }}{{ + 'a' }}{{ 'a' + }}", "{{ 'a' + {'k': 1}.k }}{{ '}}' + b }}{{ 'a' + -b }}{{ + 'a' }}{{ 'a' + }}"},
		{"{{ 'a' + b is string }}{{ 'a', 'b' }}{{ not 'a' + b }}", "{{ 'a' + b is string }}{{ 'a', 'b' }}{{ not 'a' + b }}"},
	} {
		if got := rewriteConcat(tt.src); got != tt.want {
			t.Errorf("rewriteConcat(%q):\ngot  %q\nwant %q", tt.src, got, tt.want)
		}
	}
}

// TestRewriteConcatRenders renders split templates and the originals with the library on
// values of every kind: string operands print as they did, and any other operand fails the
// render as Python's + of a string does.
func TestRewriteConcatRenders(t *testing.T) {
	vars := map[string]jinja.Value{
		"s": jinja.NewString("str"), "i": jinja.NewInt(7), "f": jinja.NewFloat(2.5), "n": jinja.None(),
		"b": jinja.NewBool(true), "l": jinja.NewList([]jinja.Value{jinja.NewString("x"), jinja.NewInt(1)}),
		catFilterName: catValue,
	}
	d := jinja.NewDict()
	d.AsDict().Set("k", jinja.NewList([]jinja.Value{jinja.NewString("v")}))
	vars["d"] = d
	for _, src := range []string{
		"{{ '<' + s + '|' + s.upper() + '|' + l[0] + '|' + s[1:] + '|' + d.k|join + d.get('k')|first + '>' }}",
		"{{- s + '\\n' + (l|length)|string + '' -}}",
		"a {{- s + '' }} b {{ '' + s -}} c",
	} {
		split := rewriteConcat(src)
		if split == src {
			t.Errorf("%q was not split", src)
			continue
		}
		want, werr := libraryRender(t, src, vars)
		got, gerr := libraryRender(t, split, vars)
		if werr != nil || gerr != nil || got != want {
			t.Errorf("%q: split renders %q, %v; the original %q, %v", src, got, gerr, want, werr)
		}
	}
	for _, op := range []string{"i", "f", "n", "b", "l", "d", "u", "(i + 1)", "l|length"} {
		for _, src := range []string{"{{ '<' + " + op + " }}", "{{ " + op + " + '>' }}", "{{ '<' + s + " + op + " + '>' }}"} {
			split := rewriteConcat(src)
			if split == src {
				t.Errorf("%q was not split", src)
				continue
			}
			if got, err := libraryRender(t, split, vars); err == nil {
				t.Errorf("%q (split %q) renders %q; Python raises", src, split, got)
			}
		}
	}
}

// BenchmarkRenderConcat renders the Qwen3 template (as compiled: whitespace applied, trim
// and tojson renamed, operators checked)
// on the bench conversation with its concatenations as written and split by rewriteConcat.
func BenchmarkRenderConcat(b *testing.B) {
	r, err := New(repoPath(".cache", "tokenizers", "qwen3"), Options{})
	if err != nil {
		b.Fatal(err)
	}
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
	vars, _, _, perr := r.buildVars(req, r.defaultT.format, nil, r.defaultT.filters)
	if perr != nil {
		b.Fatal(perr.Message)
	}
	src := rewriteTojson(rewriteTrim(rewriteWhitespace(prepareSource(r.defaultT.source))))
	for name, src := range map[string]string{"as-written": rewriteOperators(src), "split": rewriteOperators(rewriteConcat(src))} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.RenderValues(vars); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
