package pipeline

import (
	"testing"

	"github.com/kvgate/kvgate/pkg/chat"
	"github.com/kvgate/kvgate/pkg/openai"
)

type plainRenderer struct{}

func (plainRenderer) Render(*openai.ChatRequest) (chat.Result, *openai.Error) {
	return chat.Result{}, nil
}

type expandingRenderer struct{ plainRenderer }

func (expandingRenderer) Expand(*chat.Result, func(*chat.MediaItem) string) chat.Expanded {
	return chat.Expanded{}
}

type wrappingRenderer struct{ ChatRenderer }

func (w wrappingRenderer) Unwrap() ChatRenderer { return w.ChatRenderer }

// TestExpanderOf: media expansion is found on the renderer, and through wrappers that add
// something else (an endpoint's generation defaults): a wrapper must not turn exact routing
// past images back into affinity.
func TestExpanderOf(t *testing.T) {
	tests := []struct {
		name string
		r    ChatRenderer
		want bool
	}{
		{"expanding", expandingRenderer{}, true},
		{"plain", plainRenderer{}, false},
		{"wrapped expanding", wrappingRenderer{expandingRenderer{}}, true},
		{"wrapped twice", wrappingRenderer{wrappingRenderer{expandingRenderer{}}}, true},
		{"wrapped plain", wrappingRenderer{plainRenderer{}}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if _, ok := expanderOf(tt.r); ok != tt.want {
			t.Errorf("%s: expander found %v, want %v", tt.name, ok, tt.want)
		}
	}
}
