package chat

import "testing"

func TestMayMutateValues(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want bool
	}{
		{"{% for m in messages %}{{ m.content | trim }}{% endfor %}", false},
		{"{% set ns = namespace(a=1) %}{% for m in messages %}{% set ns.a = loop.index %}{% endfor %}{{ ns.a }}", false},
		{"{% set ns = namespace() %}{% set ns.x.y = tools %}{% set loop_messages = messages[1:] %}", false},
		{"{% for m in messages %}{% set loop.x = 1 %}{% endfor %}", false},
		{"{{ '.append' }}{# x.append(1) #}{% raw %}{{ x.pop() }}{% endraw %}{{ x | map('upper') }}", false},
		// Mutating methods, called or not.
		{"{% set l = [] %}{% do l.append(1) %}", true},
		{"{{ tools[0].function.parameters.pop('type') }}", true},
		{"{% set f = messages.insert %}", true},
		{"{{ d.update({'a': 1}) }}", true},
		// Attribute assignments on what is not only a namespace.
		{"{% for tool in tools %}{% set tool.x = 1 %}{% endfor %}", true},
		{"{% set ns = namespace() %}{% for ns in tools %}{% endfor %}{% set ns.x = 1 %}", true},
		{"{% set ns = namespace() %}{% set ns = tools[0] %}{% set ns.x = 1 %}", true},
		{"{% set ns = namespace() %}{% set a, ns = 1, tools[0] %}{% set ns.x = 1 %}", true},
		{"{% set ns %}x{% endset %}{% set ns.x = 1 %}", true},
		{"{% macro f(ns) %}{% set ns.x = 1 %}{% endmacro %}{{ f(tools[0]) }}", true},
		{"{% set namespace = f %}{% set ns = namespace() %}{% set ns.x = 1 %}", true},
		{"{% set tools.x = 1 %}", true},
		// Sources the library may delimit differently, or the lexer cannot read.
		{"{{ {'a': {'b': 1}} ~ x.append(1) }}", true},
		{"{{ 'open", true},
	} {
		if got := mayMutateValues(tt.src); got != tt.want {
			t.Errorf("mayMutateValues(%q) = %v, want %v", tt.src, got, tt.want)
		}
	}
	// The golden templates: the ones that change nothing share tool schemas.
	names, renderers := goldenRenderers(t)
	for _, name := range names {
		r := renderers[name]
		if r.defaultT != nil {
			t.Logf("%-16s shares values: %v", name, r.defaultT.shares)
		}
	}
}
