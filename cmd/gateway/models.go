package main

import (
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/kvgate/kvgate/pkg/discovery"
	"github.com/kvgate/kvgate/pkg/endpoint"
	"github.com/kvgate/kvgate/pkg/indexer"
	"github.com/kvgate/kvgate/pkg/pipeline"
	"github.com/kvgate/kvgate/pkg/policy"
	"github.com/kvgate/kvgate/pkg/router"
	"github.com/kvgate/kvgate/pkg/tokenizer"
	"github.com/kvgate/kvgate/pkg/worker"
)

// modelOptions is one entry of the config file's models: a model served beside the default one
// (the flags'), with its own tokenizer and chat template (model_path, or tokenizer for a
// tokenizer.json alone), chat options with the flags' names and defaults, policy keys that
// override the top level's, and its workers and discover specs (whose model= is the entry's
// name). A request whose model is name is routed among these workers only.
type modelOptions struct {
	Name      string `yaml:"name"`
	ModelPath string `yaml:"model_path"`
	Tokenizer string `yaml:"tokenizer"`
	// Chat options default as the flags do (auto parsers from this model's family), not to
	// the top level's: a template belongs to one model.
	chatOptions `yaml:",inline"`
	// Policy keys: unset ones are the top level's.
	Policy              string   `yaml:"policy"`
	CacheThreshold      *float64 `yaml:"cache_threshold"`
	BalanceAbsThreshold *int64   `yaml:"balance_abs_threshold"`
	BalanceRelThreshold *float64 `yaml:"balance_rel_threshold"`
	PrefillWeight       *float64 `yaml:"prefill_weight"`
	QueueWeight         *float64 `yaml:"queue_weight"`
	DecodeWeight        *float64 `yaml:"decode_weight"`
	BoundedLoadFactor   *float64 `yaml:"bounded_load_factor"`
	Temperature         *float64 `yaml:"temperature"`
	// Prefill/decode keys: unset ones are the top level's.
	PrefillPolicy       string `yaml:"prefill_policy"`
	DecodePolicy        string `yaml:"decode_policy"`
	PDTransfer          string `yaml:"pd_transfer"`
	PDMinUncachedTokens *int   `yaml:"pd_min_uncached_tokens"`
	// BlockSize is the model's default KV block size (0: the top level's --block-size).
	BlockSize int             `yaml:"block_size"`
	Workers   []workerEntry   `yaml:"workers"`
	Discover  []discoverEntry `yaml:"discover"`
}

// defaulted returns m with the chat options the YAML left empty at the flags' defaults.
func (m modelOptions) defaulted() modelOptions {
	d := defaultChatOptions()
	if m.ChatTemplateContentFormat == "" {
		m.ChatTemplateContentFormat = d.ChatTemplateContentFormat
	}
	if m.ReasoningParser == "" {
		m.ReasoningParser = d.ReasoningParser
	}
	if m.ToolCallParser == "" {
		m.ToolCallParser = d.ToolCallParser
	}
	if m.ReasoningField == "" {
		m.ReasoningField = d.ReasoningField
	}
	if m.Multimodal == "" {
		m.Multimodal = d.Multimodal
	}
	if m.MaxMediaBytes == 0 {
		m.MaxMediaBytes = d.MaxMediaBytes
	}
	return m
}

// validateFleet checks the workers, discover specs and models: every model entry named once
// and complete, its workers' and discover specs' model= set to its name, no worker URL and no
// DNS name listed twice anywhere.
func (o *options) validateFleet() error {
	names := map[string]bool{}
	for i := range o.Models {
		m := o.Models[i].defaulted()
		switch {
		case m.Name == "":
			return fmt.Errorf("gateway: config: models[%d]: name is required", i)
		case names[m.Name]:
			return fmt.Errorf("gateway: config: model %q is configured twice", m.Name)
		case m.Name == o.defaultModel().Name:
			return fmt.Errorf("gateway: config: model %q is the top-level model (--model, or --model-path's base name) already", m.Name)
		case m.ModelPath != "" && m.Tokenizer != "":
			return fmt.Errorf("gateway: config: model %q: give model_path or tokenizer, not both", m.Name)
		case m.ChatTemplate != "" && m.ModelPath == "":
			return fmt.Errorf("gateway: config: model %q: chat_template needs model_path", m.Name)
		case m.BlockSize < 0 || m.BlockSize > worker.MaxBlockSize:
			return fmt.Errorf("gateway: config: model %q: block_size %d out of range", m.Name, m.BlockSize)
		}
		names[m.Name] = true
		if err := m.chatOptions.validate(); err != nil {
			return fmt.Errorf("gateway: config: model %q: %w", m.Name, err)
		}
		for j := range m.Workers {
			w := &m.Workers[j]
			if w.Model != "" && w.Model != m.Name {
				return fmt.Errorf("gateway: config: model %q: worker %s names model %q", m.Name, w.URL, w.Model)
			}
			w.Model = m.Name
		}
		for j := range m.Discover {
			d := &m.Discover[j]
			s, err := d.WithModel(m.Name)
			if err != nil {
				return fmt.Errorf("gateway: config: %w", err)
			}
			d.Spec = s
		}
		o.Models[i] = m
	}
	urls := map[string]bool{}
	for _, w := range o.allWorkers() {
		if urls[w.URL] {
			return fmt.Errorf("gateway: worker %s is listed twice", w.URL)
		}
		urls[w.URL] = true
	}
	if err := o.validateRoles(); err != nil {
		return err
	}
	dns := map[string]bool{}
	for _, d := range o.discoverSpecs() {
		if dns[d.Name] {
			return fmt.Errorf("gateway: dns=%s is discovered twice", d.Name)
		}
		dns[d.Name] = true
	}
	return nil
}

// allWorkers returns every configured worker: the top level's (file and flags) and each
// model's.
func (o *options) allWorkers() []workerEntry {
	all := append([]workerEntry(nil), o.Workers...)
	for _, m := range o.Models {
		all = append(all, m.Workers...)
	}
	return all
}

// workerSpecs returns the workers of one origin: the --worker flags' (fromFlag) or the file's.
func (o *options) workerSpecs(fromFlag bool) []worker.Spec {
	var out []worker.Spec
	for _, w := range o.allWorkers() {
		if w.fromFlag == fromFlag {
			out = append(out, w.Spec)
		}
	}
	return out
}

// discoverSpecs returns every discover spec: the top level's (file and flags) and each model's.
func (o *options) discoverSpecs() []discovery.Spec {
	var out []discovery.Spec
	for _, d := range o.Discover {
		out = append(out, d.Spec)
	}
	for _, m := range o.Models {
		for _, d := range m.Discover {
			out = append(out, d.Spec)
		}
	}
	return out
}

// policyConfig returns the policy configuration of the top level, with m's overrides when m
// is not nil (the default model's entry has none).
func (o *options) policyConfig(m *modelOptions) (string, policy.Config) {
	pc := policy.DefaultConfig()
	pc.CacheThreshold = o.CacheThreshold
	pc.BalanceAbsThreshold = o.BalanceAbsThreshold
	pc.BalanceRelThreshold = o.BalanceRelThreshold
	pc.BoundedLoadFactor = o.BoundedLoadFactor
	pc.PrefillWeight = o.PrefillWeight
	pc.QueueWeight = o.QueueWeight
	pc.DecodeWeight = o.DecodeWeight
	pc.Temperature = o.Temperature
	name := o.Policy
	if m == nil {
		return name, pc
	}
	if m.Policy != "" {
		name = m.Policy
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&pc.CacheThreshold, m.CacheThreshold)
	set(&pc.BalanceRelThreshold, m.BalanceRelThreshold)
	set(&pc.PrefillWeight, m.PrefillWeight)
	set(&pc.QueueWeight, m.QueueWeight)
	set(&pc.DecodeWeight, m.DecodeWeight)
	set(&pc.BoundedLoadFactor, m.BoundedLoadFactor)
	set(&pc.Temperature, m.Temperature)
	if m.BalanceAbsThreshold != nil {
		pc.BalanceAbsThreshold = *m.BalanceAbsThreshold
	}
	return name, pc
}

// defaultModel returns the default model as a model entry: the top level's model path or
// tokenizer, chat options and policy, named by --model, else by --model-path's base name, else
// not at all (the first model one of its workers reports).
func (o *options) defaultModel() modelOptions {
	m := modelOptions{Name: o.Model, ModelPath: o.ModelPath, Tokenizer: o.Tokenizer, chatOptions: o.chatOptions, BlockSize: o.BlockSize}
	if m.Name == "" && o.ModelPath != "" {
		m.Name = filepath.Base(filepath.Clean(o.ModelPath))
	}
	return m
}

// buildModel loads a model entry's tokenizer and template and builds its parsers, policy (the
// top level's with the entry's overrides), index, tree and pending overlay (sized by the top
// level). Every model is built by it, the flags' default model (options.defaultModel) too.
func buildModel(o *options, m modelOptions, log *zap.Logger) (router.Model, error) {
	rm := router.Model{Name: m.Name, BlockSize: m.BlockSize, ReasoningField: m.ReasoningField}
	if rm.BlockSize == 0 {
		rm.BlockSize = o.BlockSize
	}
	log = log.With(zap.String("model", m.Name))
	fail := func(what string, err error) (router.Model, error) {
		return rm, fmt.Errorf("gateway: model %q: %s%w", m.Name, what, err)
	}
	path := m.ModelPath // validateFleet: not both
	if path == "" {
		path = m.Tokenizer
	}
	tok, err := tokenizer.LoadPath(path)
	if err != nil {
		return fail("", err)
	}
	if tok != nil {
		rm.Tokenizer = pipeline.FromTokenizer(tok)
	}
	cs, err := buildChat(m.ModelPath, m.Name, tok, m.chatOptions, log)
	if err != nil {
		return fail("", err)
	}
	switch {
	case cs.renderer != nil:
		// The render routes' sampling defaults, read from the model directory as vLLM reads them.
		gen, err := endpoint.LoadGeneration(m.ModelPath)
		if err != nil {
			return fail("", err)
		}
		rm.Chat = endpoint.WithGeneration(cs.renderer, gen)
	case tok != nil:
		log.Warn("a tokenizer without a model directory: no chat template, so chat requests are routed without prefix information")
	case m.ModelPath == "" && m.Tokenizer == "" && m.Name != "":
		log.Warn("model without model_path or tokenizer: its prompts are routed without prefix information")
	}
	rm.ChatParsers = cs.parsers
	name, pc := o.policyConfig(&m)
	if rm.Policy, err = policy.New(name, pc); err != nil {
		return fail("policy: ", err)
	}
	if rm.PD, err = o.pdConfig(&m, pc); err != nil {
		return fail("", err)
	}
	if rm.Index, rm.Tree, rm.Pending, err = buildIndexes(o, rm.BlockSize); err != nil {
		return fail("", err)
	}
	return rm, nil
}

// validateRoles rejects a model whose listed workers have one prefill/decode role but no
// worker to serve the other leg (DNS discovery may bring them: then it is not checked).
func (o *options) validateRoles() error {
	if len(o.discoverSpecs()) > 0 {
		return nil
	}
	type roles struct{ prefill, decode, both int }
	by := map[string]*roles{}
	var order []string
	for _, w := range o.allWorkers() {
		r := by[w.Model]
		if r == nil {
			r = &roles{}
			by[w.Model] = r
			order = append(order, w.Model)
		}
		switch w.Role {
		case worker.RolePrefill:
			r.prefill++
		case worker.RoleDecode:
			r.decode++
		default:
			r.both++
		}
	}
	for _, name := range order {
		r := by[name]
		if name == "" {
			name = o.defaultModel().Name
		}
		switch {
		case r.prefill > 0 && r.decode+r.both == 0:
			return fmt.Errorf("gateway: model %q has role=prefill workers but no worker of role decode or both", name)
		case r.decode > 0 && r.prefill+r.both == 0:
			return fmt.Errorf("gateway: model %q has role=decode workers but no worker of role prefill or both", name)
		}
	}
	return nil
}

// pdConfig returns a model's prefill/decode configuration: the top level's, with m's
// overrides, its policies built with the model's policy configuration pc.
func (o *options) pdConfig(m *modelOptions, pc policy.Config) (pipeline.PD, error) {
	pd := pipeline.PD{Transfer: o.PDTransfer, MinUncachedTokens: o.PDMinUncachedTokens, Timeout: o.PDTimeout}
	pre, dec := o.PrefillPolicy, o.DecodePolicy
	if m.PrefillPolicy != "" {
		pre = m.PrefillPolicy
	}
	if m.DecodePolicy != "" {
		dec = m.DecodePolicy
	}
	if m.PDTransfer != "" {
		pd.Transfer = m.PDTransfer
	}
	if m.PDMinUncachedTokens != nil {
		pd.MinUncachedTokens = *m.PDMinUncachedTokens
	}
	if pd.MinUncachedTokens == 0 { // 0 would mean the default: an explicit 0 splits every request
		pd.MinUncachedTokens = -1
	}
	var err error
	if pd.PrefillPolicy, err = policy.New(pre, pc); err != nil {
		return pd, fmt.Errorf("prefill policy: %w", err)
	}
	if pd.DecodePolicy, err = policy.New(dec, pc); err != nil {
		return pd, fmt.Errorf("decode policy: %w", err)
	}
	return pd, nil
}

// buildIndexes builds one model's event index, approximate tree and pending overlay.
func buildIndexes(o *options, blockSize int) (*indexer.Index, *indexer.Tree, *indexer.Pending, error) {
	idx, err := indexer.New(indexer.Config{MaxBlocks: o.IndexMaxBlocks})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("index: %w", err)
	}
	tree, err := indexer.NewTree(indexer.TreeConfig{BlockSize: blockSize, MaxBlocksPerWorker: o.TreeMaxBlocks, TTL: o.TreeTTL})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tree: %w", err)
	}
	pend, err := indexer.NewPending(indexer.PendingConfig{TTL: o.PendingTTL})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pending: %w", err)
	}
	return idx, tree, pend, nil
}
