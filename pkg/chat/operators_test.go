package chat

import "testing"

// TestRewriteOperators checks the source handed to the library; what it renders is checked
// against Jinja2 by TestProbes (op-*).
func TestRewriteOperators(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{{ a + b }}", "{{ (a )|__kvgate_add( b )}}"},
		{"{{ a + b - c }}", "{{ ((a )|__kvgate_add( b ))|__kvgate_sub( c )}}"},
		{"{{ a ~ b + c }}", "{{ ((a )|__kvgate_tilde( b ))|__kvgate_add( c )}}"}, // Jinja2: ~ binds tighter than +
		{"{{ 'x' ~ a % 2 ~ b * c }}", "{{ (('x' )|__kvgate_tilde( (a )|__kvgate_mod( 2 )))|__kvgate_tilde( (b )|__kvgate_mul( c ))}}"},
		{"{{ x|f(a + 1) }}{{ -a + +b }}", "{{ x|f((a )|__kvgate_add( 1)) }}{{ ((a )|__kvgate_neg)|__kvgate_add( +b )}}"},
		{"{% if a + 1 > b %}{% elif c - 1 %}{% endif %}", "{% if ((a )|__kvgate_add( 1 ))|__kvgate_gt( b )%}{% elif (c )|__kvgate_sub( 1 )%}{% endif %}"},
		{"{% set x = a + b %}{% set ns.y = [1] + c %}", "{% set x = (a )|__kvgate_add( b )%}{% set ns.y = ([1] )|__kvgate_add( c )%}"},
		{"{% for k, v in d.items() if v + 1 recursive %}", "{% for k, v in (d.items() )|__kvgate_iter if (v )|__kvgate_add( 1 )recursive %}"},
		{"{% for x in a + b %}", "{% for x in ((a )|__kvgate_add( b ))|__kvgate_iter %}"},
		{"{% if -x|f is not iterable and y.z is sequence %}{{ a is callable }}{{ b is divisibleby 3 }}{{ c is iterable() }}",
			"{% if ((x)|__kvgate_neg|f )|__kvgate_test('iterable', false) and (y.z )|__kvgate_test('sequence', true) %}{{ (a )|__kvgate_test('callable', true) }}{{ b is divisibleby 3 }}{{ c is iterable() }}"},
		// * / // ** and ordering comparisons, two-character operators included; unary - but of
		// a number literal, whose filters apply to the negation, as in Jinja2.
		{"{{ a // b ** 2 / c }}{{ x[-1] - -y }}", "{{ ((a )|__kvgate_floordiv( (b )|__kvgate_pow( 2 )))|__kvgate_div( c )}}{{ (x[-1] )|__kvgate_sub( (y )|__kvgate_neg)}}"},
		{"{% if a <= b and c >= d or e < f %}", "{% if (a )|__kvgate_le( b )and (c )|__kvgate_ge( d )or (e )|__kvgate_lt( f )%}"},
		// Left alone: comparison chains, equality and membership, which the library gets right.
		{"{% if a < b < c %}{% if a == b %}{% if a in b %}{% if a < b == c %}", "{% if (a )|__kvgate_chain('<', ( b ), '<', ( c ))%}{% if a == b %}{% if a in b %}{% if (a )|__kvgate_chain('<', ( b ), '==', ( c ))%}"},
		{"{{ x + 1 < y not in z }}", "{{ ((x )|__kvgate_add( 1 ))|__kvgate_chain('<', ( y ), 'not in', ( z ))}}"},
		// Left alone: statements it does not read, unreadable tags, text and comments.
		{"{% macro m(x=1 + 2) %}{% endmacro %}a + b{# a + b #}", "{% macro m(x=1 + 2) %}{% endmacro %}a + b{# a + b #}"},
		{"{{ a + }}{{ a + b c }}", "{{ a + }}{{ a + b c }}"},
	} {
		if got := rewriteOperators(c.in); got != c.want {
			t.Errorf("rewriteOperators(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}
