package router

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/kvgate/kvgate/pkg/chat/parse"
	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/worker"
)

// Model is one model of Config.Models (a `models:` entry of the gateway's config file) served
// beside the default one: the workers whose spec names it form its pool, and its requests are
// tokenized, rendered, scored and picked with its own fields, so that neither its prompts nor its
// cached blocks mix with another model's (token ids of two tokenizers mean different text, and
// one model's traffic must not evict another's blocks from a shared index).
type Model struct {
	// Name is the served model name clients ask for, and the spec model= of its workers.
	// Required; unique, and not Config.Model.
	Name string
	// Tokenizer, Chat, ChatParsers and ReasoningField are as in Config, for this model.
	Tokenizer      Tokenizer
	Chat           ChatRenderer
	ChatParsers    *parse.Parsers
	ReasoningField string
	// Policy picks among the model's workers (nil: Config.Policy).
	Policy policy.Policy
	// BlockSize is the model's default block size (0: Config.BlockSize); Tree, when set, must
	// use it.
	BlockSize int
	// Index is the model's own event index (required); Tree and Pending are optional.
	Index   *indexer.Index
	Tree    *indexer.Tree
	Pending *indexer.Pending
}

// pool is the routing state of one model: the default pool (Config's own fields; workers whose
// spec names no configured model, served as they always were) or a Model's. A pool is
// immutable: replacing a model builds a new pool, and its workers are rebuilt in it.
type pool struct {
	name           string // "" for the default pool
	tok            Tokenizer
	chat           ChatRenderer
	parsers        *parse.Parsers
	reasoningField string
	policy         policy.Policy
	blockSize      int
	lookup         indexer.Lookup
	// engineCfg is what the pool's members' engines are built with (its tokenizer decodes
	// their gRPC output).
	engineCfg engine.Config
}

// newDefaultPool builds the default pool from the router's validated Config.
func (rt *Router) newDefaultPool() *pool {
	cfg := &rt.cfg
	p := &pool{tok: cfg.Tokenizer, chat: cfg.Chat, parsers: cfg.ChatParsers, reasoningField: cfg.ReasoningField,
		policy: cfg.Policy, blockSize: cfg.BlockSize, engineCfg: rt.engineCfg,
		lookup: indexer.Lookup{Index: cfg.Index, Tree: cfg.Tree, Pending: cfg.Pending, BlockSize: cfg.BlockSize, EventsOff: cfg.KVIndex == KVIndexOff}}
	if cfg.Tokenizer != nil {
		p.engineCfg.Tokenizer = cfg.Tokenizer
	}
	return p
}

// newModelPool validates m and builds its pool.
func (rt *Router) newModelPool(m Model) (*pool, error) {
	switch {
	case m.Name == "":
		return nil, errors.New("router: model: a name is required")
	case m.Name == rt.cfg.Model:
		return nil, fmt.Errorf("router: model %q: it is the default model (Config.Model) already", m.Name)
	case m.Index == nil:
		return nil, fmt.Errorf("router: model %q: an index is required", m.Name)
	}
	if m.BlockSize == 0 {
		m.BlockSize = rt.cfg.BlockSize
	}
	if m.BlockSize < 1 || m.BlockSize > worker.MaxBlockSize {
		return nil, fmt.Errorf("router: model %q: block size %d out of range", m.Name, m.BlockSize)
	}
	if m.Tree != nil && m.Tree.BlockSize() != m.BlockSize {
		return nil, fmt.Errorf("router: model %q: the tree's block size %d is not the model's %d", m.Name, m.Tree.BlockSize(), m.BlockSize)
	}
	if m.Policy == nil {
		m.Policy = rt.cfg.Policy
	}
	p := &pool{name: m.Name, tok: m.Tokenizer, chat: m.Chat, parsers: m.ChatParsers, reasoningField: m.ReasoningField,
		policy: m.Policy, blockSize: m.BlockSize, engineCfg: rt.engineCfg,
		lookup: indexer.Lookup{Index: m.Index, Tree: m.Tree, Pending: m.Pending, BlockSize: m.BlockSize, EventsOff: rt.cfg.KVIndex == KVIndexOff}}
	p.engineCfg.Tokenizer = nil
	if m.Tokenizer != nil {
		p.engineCfg.Tokenizer = m.Tokenizer
	}
	return p, nil
}

// poolFor returns the pool a worker spec belongs to: the configured model its spec names, else
// the default pool.
func (f *fleet) poolFor(s worker.Spec) *pool {
	if p := f.models[s.Model]; p != nil && s.Model != "" {
		return p
	}
	return f.def
}

// defaultModel returns the model name a request without one gets: Config.Model, else the first
// model a worker of the default pool reported, else the first configured model.
func (f *fleet) defaultModel(configured string) string {
	if configured != "" {
		return configured
	}
	for _, m := range f.members {
		if m.pool == f.def {
			if n := m.w.ReportedModel(); n != "" {
				return n
			}
		}
	}
	if len(f.modelNames) > 0 {
		return f.modelNames[0]
	}
	return ""
}

// resolve returns the pool that serves requests for model (already defaulted) and the request's
// block-key namespace (DESIGN.md §3): a configured model's pool and ""; else, when some worker
// lists model as a LoRA adapter, that worker's pool and the model name itself as namespace, the
// same string the index derives from an event's lora_name (indexer.Namespace(model, 0, false,
// "")), such a request routing only among the workers that list the adapter (eligibleFor); else
// the default pool and "".
//
// A request's cache_salt is not part of the namespace: the engines' events do not carry the
// salt in a form kvgate parses, so salted requests are scored as if unsalted (they may be
// credited with blocks the engine will not reuse for them, which costs a worse choice, never a
// wrong answer).
//
// Adapter requests do not use the approximate tree: it is keyed by raw tokens with no
// namespace, so an adapter prompt would match (and later be matched by) the base model's. They
// are scored from events and the pending overlay, whose keys carry the namespace.
func (f *fleet) resolve(model string) (*pool, string) {
	if p := f.models[model]; p != nil {
		return p, ""
	}
	if model != "" {
		for _, m := range f.members {
			if m.w.HasAdapter(model) {
				return m.pool, indexer.Namespace(model, 0, false, "")
			}
		}
	}
	return f.def, ""
}

// knows reports whether requests for model may be routed in p at all (a 404 otherwise): p is a
// configured model's pool, or one of its workers (healthy or not) serves the name.
func (f *fleet) knows(p *pool, model, def, ns string) bool {
	if p.name != "" && p.name == model {
		return true
	}
	for _, m := range f.members {
		if m.pool == p && eligibleFor(m, model, def, ns) {
			return true
		}
	}
	return false
}

// SetModel adds a model while serving, or replaces the one of that name: the new pool starts
// with an empty index, and the workers of the old one, like those whose spec names the model
// and were served by the default pool, drain and start again in it. It fails, changing nothing,
// for an invalid model or a worker that cannot be rebuilt.
func (rt *Router) SetModel(m Model) error {
	p, err := rt.newModelPool(m)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped {
		return errors.New("router: set model: router stopped")
	}
	old := rt.fleet.Load()
	models := maps.Clone(old.models)
	models[m.Name] = p
	names := old.modelNames
	if !slices.Contains(names, m.Name) {
		names = append(slices.Clip(names), m.Name)
	}
	return rt.setModelsLocked(old, models, names)
}

// RemoveModel stops serving a configured model: its workers drain, and any whose spec still
// names it (a --worker flag's, say) starts again in the default pool, served as it would be
// with no models configured. It fails for a model that is not configured.
func (rt *Router) RemoveModel(name string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	old := rt.fleet.Load()
	if old.models[name] == nil {
		return fmt.Errorf("router: remove model %q: not configured", name)
	}
	models := maps.Clone(old.models)
	delete(models, name)
	return rt.setModelsLocked(old, models, slices.DeleteFunc(slices.Clone(old.modelNames), func(n string) bool { return n == name }))
}

// ModelNames returns the configured models' names (Config.Models and SetModel), in order.
func (rt *Router) ModelNames() []string { return slices.Clone(rt.fleet.Load().modelNames) }

// setModelsLocked publishes old's workers under new models and reconciles them into their
// pools; on failure it puts old back.
func (rt *Router) setModelsLocked(old *fleet, models map[string]*pool, names []string) error {
	f := old.with(old.members, old.draining)
	f.models, f.modelNames = models, names
	rt.fleet.Store(f)
	if err := rt.reconcileLocked(); err != nil {
		rt.fleet.Store(old)
		return err
	}
	return nil
}
