package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvgate/kvgate/pkg/pipeline"
)

// Generation is what a model's generation_config.json gives vLLM's sampling defaults
// (ModelConfig.get_diff_sampling_param with the default --generation-config auto): the
// values a request leaves unset take these, else vLLM's own defaults. nil fields are not
// set. The zero value sets nothing.
type Generation struct {
	RepetitionPenalty *float64
	Temperature       *float64
	TopK              *int64
	TopP              *float64
	MinP              *float64
	// MaxTokens is max_new_tokens: the output budget of a request that names none.
	MaxTokens *int64
}

// maxGenerationConfigBytes bounds the generation_config.json read (real ones are a few
// hundred bytes).
const maxGenerationConfigBytes = 1 << 20

// LoadGeneration reads dir/generation_config.json as vLLM does: transformers' GenerationConfig
// drops the values equal to its own defaults (to_diff_dict: temperature 1.0, top_k 50, top_p
// 1.0, repetition_penalty 1.0), and of the rest vLLM keeps repetition_penalty, temperature,
// top_k, top_p, min_p and max_new_tokens. A directory without the file gives the zero value
// (vLLM would then derive a generation config from config.json, which holds no sampling
// values for the models the gateway serves).
func LoadGeneration(dir string) (Generation, error) {
	var g Generation
	f, err := os.Open(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("endpoint: generation config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxGenerationConfigBytes+1))
	if err != nil {
		return g, fmt.Errorf("endpoint: generation config: %w", err)
	}
	if len(b) > maxGenerationConfigBytes {
		return g, fmt.Errorf("endpoint: generation config: %s is larger than %d bytes", f.Name(), maxGenerationConfigBytes)
	}
	var raw struct {
		RepetitionPenalty *float64 `json:"repetition_penalty"`
		Temperature       *float64 `json:"temperature"`
		TopK              *int64   `json:"top_k"`
		TopP              *float64 `json:"top_p"`
		MinP              *float64 `json:"min_p"`
		MaxNewTokens      *int64   `json:"max_new_tokens"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return g, fmt.Errorf("endpoint: generation config %s: %w", f.Name(), err)
	}
	g.RepetitionPenalty = unlessFloat(raw.RepetitionPenalty, 1)
	g.Temperature = unlessFloat(raw.Temperature, 1)
	g.TopP = unlessFloat(raw.TopP, 1)
	if raw.TopK != nil && *raw.TopK != 50 {
		g.TopK = raw.TopK
	}
	g.MinP, g.MaxTokens = raw.MinP, raw.MaxNewTokens
	return g, nil
}

// unlessFloat returns v unless it is transformers' default def (dropped by to_diff_dict).
func unlessFloat(v *float64, def float64) *float64 {
	if v == nil || *v == def {
		return nil
	}
	return v
}

// WithGeneration returns r carrying the model's generation defaults g, which the render
// routes read (their sampling_params); rendering itself is r's. nil r stays nil.
func WithGeneration(r pipeline.ChatRenderer, g Generation) pipeline.ChatRenderer {
	if r == nil {
		return nil
	}
	return &generationRenderer{ChatRenderer: r, g: g}
}

// generationRenderer is a renderer with its model's generation defaults; Render is the
// embedded renderer's.
type generationRenderer struct {
	pipeline.ChatRenderer
	g Generation
}

// Unwrap returns the renderer underneath, whose optional abilities the pipeline looks for.
func (r *generationRenderer) Unwrap() pipeline.ChatRenderer { return r.ChatRenderer }

// generationOf returns the generation defaults a model's renderer carries (zero: none).
func generationOf(s *pipeline.Served) Generation {
	if r, ok := s.Chat.(*generationRenderer); ok {
		return r.g
	}
	return Generation{}
}

var _ pipeline.RendererWrapper = (*generationRenderer)(nil)
