package chat

import (
	"strings"
	"testing"
	"time"
)

// TestRewriteWhitespace checks the source handed to the library; what it renders is checked
// against Jinja2 by TestProbes (ws-control-*).
func TestRewriteWhitespace(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"no tags\n", "no tags\n"},
		{"{% for m in x %}{{ m }}\n{% endfor %}", "{%+ for m in x +%}{{ m }}\n{%+ endfor +%}"},
		{"a  \n  {%- if y -%}  \n b{{- c -}} d", "a{%+ if y +%}b{{ c }}d"},
		{"{{--1-}}", "{{ -1}}"},
		{"{{ a - -}}", "{{ a - }}"},
		{"a{ \n{%- if y %}", "a{{ '{' }}{%+ if y +%}"},
		{"{% raw %}{ \n{%- endraw %}", "{%+ raw +%}{{%+ endraw +%}"},
		{"{# a %} #}\n{{ '}}' }}", "{#+ a %} +#}{{ '}}' }}"},
		{"{% set d = {'a': 1}%}\nx", "{%+ set d = {'a': 1}+%}x"},
		// Unreadable: left for the library to report.
		{"{{ x", "{{ x"},
		{"{% raw %} x", "{% raw %} x"},
	} {
		if got := rewriteWhitespace(c.in); got != c.want {
			t.Errorf("rewriteWhitespace(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRewriteWhitespaceLinear: a raw block full of openers without an endraw is read in
// linear time.
func TestRewriteWhitespaceLinear(t *testing.T) {
	src := "{% raw %}" + strings.Repeat("{%", 1<<19) + "%}"
	start := time.Now()
	if got := rewriteWhitespace(src); got != src {
		t.Fatal("an unterminated raw block was rewritten")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}
