package openai

import "testing"

// TestParsePriority checks vLLM's priority field: an integer (also written as 2.0), null as
// absent, anything else a 400 naming it, in completion and chat bodies alike.
func TestParsePriority(t *testing.T) {
	for _, tt := range []struct {
		field string
		want  *int64
		bad   bool
	}{
		{`"priority":-5,`, ptr(int64(-5)), false},
		{`"priority":2.0,`, ptr(int64(2)), false},
		{`"priority":null,`, nil, false},
		{``, nil, false},
		{`"priority":"high",`, nil, true},
		{`"priority":1.5,`, nil, true},
	} {
		cr, cerr := ParseCompletion([]byte(`{`+tt.field+`"prompt":"x"}`), Limits{})
		ch, herr := ParseChat([]byte(`{`+tt.field+`"messages":[{"role":"user","content":"x"}]}`), Limits{})
		for name, e := range map[string]*Error{"completion": cerr, "chat": herr} {
			if tt.bad != (e != nil) || e != nil && e.Param != "priority" {
				t.Errorf("%s %q: error %v, want bad=%v naming priority", name, tt.field, e, tt.bad)
			}
		}
		if tt.bad {
			continue
		}
		for name, got := range map[string]*int64{"completion": cr.Priority, "chat": ch.Priority} {
			if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
				t.Errorf("%s %q: priority %v, want %v", name, tt.field, got, tt.want)
			}
		}
	}
}
