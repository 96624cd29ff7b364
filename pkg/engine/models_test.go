package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitModels(t *testing.T) {
	tests := []struct {
		name     string
		cards    []modelCard
		base     string
		adapters []string
	}{
		{"empty", nil, "", nil},
		{"base only", []modelCard{{ID: "m", Root: "/p"}}, "m", nil},
		{"vllm lora", []modelCard{{ID: "m", Root: "/p"}, {ID: "sql", Root: "/l/sql", Parent: "m"}, {ID: "chat", Root: "/l/chat", Parent: "m"}}, "m", []string{"sql", "chat"}},
		{"adapter listed first", []modelCard{{ID: "sql", Parent: "m"}, {ID: "m", Root: "/p"}}, "m", []string{"sql"}},
		{"alias shares root", []modelCard{{ID: "m", Root: "/p"}, {ID: "m-alias", Root: "/p"}}, "m", nil},
		{"root differs without parent", []modelCard{{ID: "m", Root: "/p"}, {ID: "x", Root: "/l/x"}}, "m", []string{"x"}},
		{"self parent is no adapter", []modelCard{{ID: "m"}, {ID: "y", Parent: "y"}}, "m", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, ad := splitModels(tt.cards)
			if base != tt.base {
				t.Errorf("base: got %q, want %q", base, tt.base)
			}
			if d := cmp.Diff(tt.adapters, ad); d != "" {
				t.Errorf("adapters (-want +got):\n%s", d)
			}
		})
	}
}
