package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"
)

// Workload names accepted by --workload.
const (
	workloadPrefix = "prefix_repetition"
	workloadChat   = "chat"
	workloadTrace  = "trace"
)

// request is one completion request of a static workload (prefix_repetition, trace).
type request struct {
	id        int
	at        time.Duration // arrival offset from the start, in simulated time
	text      string        // the prompt in text mode
	ids       []uint32      // the prompt in token-id mode (nil in text mode)
	tokens    int           // prompt length in tokens; 0 when unknown (text trace without tokenizer)
	maxTokens int
}

// genConfig is the workload part of the command line.
type genConfig struct {
	kind                                    string
	numRequests                             int
	numPrefixes, prefixTokens, suffixTokens int
	prefixDist                              prefixDist
	outputTokens                            int
	turns, systemTokens, userTokens         int
	toolTokens                              int
	imagePx                                 int  // chat: side of each session's PNG (0: none)
	imageUUID                               bool // chat: the images carry uuids
	thinkTime                               time.Duration
	tracePath                               string
	traceBlockSize                          int
	rate, burstiness                        float64
	seed                                    uint64
	vocabLo, vocabHi                        uint32
}

// plan is a generated workload: either a static schedule of requests or chat sessions whose
// later turns depend on earlier answers.
type plan struct {
	requests []*request // static workloads, by arrival
	sessions []*session // chat
	// Ideal prefix-cache accounting of a static schedule (every repeat of a prefix hits, an
	// infinite cache): hit tokens over prompt tokens. idealKnown is false when prompt lengths
	// are unknown. Chat computes it while running.
	idealHit, idealTotal int64
	idealKnown           bool
	distinctPrefixes     int
	describe             string
	// system is chat's shared system prompt (systemTokens tokens).
	system       piece
	systemTokens int
	// agent: the sessions are the responses workload's (runAgentSession).
	agent bool
	// messages: the sessions are the messages workload's (runMessagesSession).
	messages     bool
	thinkTime    time.Duration
	outputTokens int
}

// ideal returns the ideal hit rate of the static schedule, or NaN when unknown.
func (p *plan) ideal() float64 {
	if !p.idealKnown || p.idealTotal == 0 {
		return nan
	}
	return float64(p.idealHit) / float64(p.idealTotal)
}

// promptMaker builds prompt content of an exact token count: text from a textBuilder, or
// token ids when tb is nil.
type promptMaker struct {
	tb     *textBuilder
	lo, hi uint32
}

type piece struct {
	text string
	ids  []uint32
}

func (m promptMaker) make(rng *rand.Rand, n int) piece {
	if m.tb != nil {
		return piece{text: m.tb.text(rng, n)}
	}
	return piece{ids: randomIDs(rng, n, m.lo, m.hi)}
}

func concat(ps ...piece) piece {
	var out piece
	for _, p := range ps {
		out.text += p.text
		out.ids = append(out.ids, p.ids...)
	}
	return out
}

func generate(cfg genConfig, m promptMaker) (*plan, error) {
	switch cfg.kind {
	case workloadPrefix:
		return genPrefix(cfg, m)
	case workloadChat:
		return genChat(cfg, m)
	case workloadResponses:
		return genResponses(cfg, m)
	case workloadMessages:
		return genMessages(cfg, m)
	case workloadTrace:
		f, err := os.Open(cfg.tracePath)
		if err != nil {
			return nil, fmt.Errorf("loadgen: trace: %w", err)
		}
		defer f.Close()
		return genTrace(cfg, m, f)
	}
	return nil, fmt.Errorf("loadgen: unknown workload %q (want %s, %s, %s, %s or %s)", cfg.kind, workloadPrefix, workloadChat, workloadResponses, workloadMessages, workloadTrace)
}

// genPrefix builds the prefix_repetition workload: numPrefixes shared prefixes of
// prefixTokens tokens, each request one of them followed by a unique suffix of suffixTokens
// tokens. Which prefix: with the uniform distribution every prefix is used equally often, in a
// seeded random order; with zipf:S request i draws prefix k with probability ∝ 1/(k+1)^S.
func genPrefix(cfg genConfig, m promptMaker) (*plan, error) {
	if cfg.numRequests < 1 || cfg.numPrefixes < 1 || cfg.prefixTokens < 0 || cfg.suffixTokens < 0 || cfg.outputTokens < 1 {
		return nil, fmt.Errorf("loadgen: prefix_repetition needs requests ≥ 1, prefixes ≥ 1, output tokens ≥ 1 and non-negative lengths")
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x70726566)) // "pref"
	prefixes := make([]piece, cfg.numPrefixes)
	for i := range prefixes {
		prefixes[i] = m.make(rng, cfg.prefixTokens)
	}
	order := cfg.prefixDist.order(rng, cfg.numRequests, cfg.numPrefixes)
	at := arrivals(rng, cfg.numRequests, cfg.rate, cfg.burstiness)

	p := &plan{idealKnown: true}
	used := make(map[int]bool)
	for i, k := range order {
		pr := concat(prefixes[k], m.make(rng, cfg.suffixTokens))
		p.requests = append(p.requests, &request{
			id: i, at: at[i], text: pr.text, ids: pr.ids,
			tokens: cfg.prefixTokens + cfg.suffixTokens, maxTokens: cfg.outputTokens,
		})
		used[k] = true
	}
	p.distinctPrefixes = len(used)
	p.idealHit = int64(cfg.numRequests-p.distinctPrefixes) * int64(cfg.prefixTokens)
	p.idealTotal = int64(cfg.numRequests) * int64(cfg.prefixTokens+cfg.suffixTokens)
	p.describe = fmt.Sprintf("%s: %d requests over %d prefixes × %d tokens + %d-token suffix, %d output tokens, prefixes %s",
		workloadPrefix, cfg.numRequests, p.distinctPrefixes, cfg.prefixTokens, cfg.suffixTokens, cfg.outputTokens, cfg.prefixDist)
	return p, nil
}

// traceLine is one line of a Mooncake-format trace (github.com/kvcache-ai/Mooncake
// FAST25-release/traces): timestamp in ms, input and output lengths in tokens, and hash_ids,
// one per block of traceBlockSize tokens (512 in Mooncake) where equal ids mean equal
// prefixes. prompt and token_ids are this tool's variants carrying the prompt itself.
type traceLine struct {
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
	Prompt       *string  `json:"prompt"`
	TokenIDs     []uint32 `json:"token_ids"`
}

// genTrace replays a trace: arrival at each line's timestamp (relative to the first line),
// unless rate > 0 asks for Poisson arrivals instead. A hash-id line becomes blocks of
// deterministic content per id (the same id always yields the same block, and a shorter last
// block is a prefix of the full one), so the trace's prefix sharing is reproduced exactly.
func genTrace(cfg genConfig, m promptMaker, r io.Reader) (*plan, error) {
	if cfg.traceBlockSize < 1 {
		return nil, errors.New("loadgen: trace block size must be ≥ 1")
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	var lines []traceLine
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var l traceLine
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("loadgen: trace line %d: %w", n, err)
		}
		lines = append(lines, l)
		if cfg.numRequests > 0 && len(lines) == cfg.numRequests {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: trace: %w", err)
	}
	if len(lines) == 0 {
		return nil, errors.New("loadgen: trace: no requests")
	}
	var at []time.Duration
	if cfg.rate > 0 {
		at = arrivals(rand.New(rand.NewPCG(cfg.seed, 0x74726163)), len(lines), cfg.rate, cfg.burstiness)
	}
	p := &plan{idealKnown: true}
	seen := make(map[int64]bool)
	blocks := make(map[int64]piece)
	bs := cfg.traceBlockSize
	t0 := lines[0].Timestamp
	for i, l := range lines {
		req := &request{id: i, maxTokens: max(l.OutputLength, 1)}
		if at != nil {
			req.at = at[i]
		} else {
			req.at = time.Duration((l.Timestamp - t0) * float64(time.Millisecond))
		}
		switch {
		case l.TokenIDs != nil:
			req.ids, req.tokens = l.TokenIDs, len(l.TokenIDs)
			p.idealKnown = false
		case l.Prompt != nil:
			req.text = *l.Prompt
			p.idealKnown = false
			if m.tb != nil {
				ids, err := m.tb.tok.encode(req.text)
				if err != nil {
					return nil, fmt.Errorf("loadgen: trace line %d: %w", i+1, err)
				}
				req.tokens = len(ids)
			}
		default:
			if l.InputLength < 1 || len(l.HashIDs) == 0 {
				return nil, fmt.Errorf("loadgen: trace line %d: needs input_length ≥ 1 and hash_ids (or prompt / token_ids)", i+1)
			}
			var parts []piece
			left := l.InputLength
			lead, leading := 0, true
			for j, h := range l.HashIDs {
				if left <= 0 {
					break
				}
				blk, ok := blocks[h]
				if !ok {
					// Content depends only on (seed, hash id): same id, same block.
					blk = m.make(rand.New(rand.NewPCG(cfg.seed, uint64(h))), bs)
					blocks[h] = blk
				}
				n := min(left, bs)
				if j == len(l.HashIDs)-1 && left > bs {
					n = left // last id covers the rest when input_length exceeds ids × block size
					blk = concat(blk, m.make(rand.New(rand.NewPCG(cfg.seed^0x6c617374, uint64(h))), left-bs))
				}
				parts = append(parts, truncate(blk, n, m))
				if leading && seen[h] {
					lead += n
				} else {
					leading = false
				}
				left -= n
			}
			for _, h := range l.HashIDs {
				seen[h] = true
			}
			pr := concat(parts...)
			req.text, req.ids, req.tokens = pr.text, pr.ids, l.InputLength
			p.idealHit += int64(lead)
		}
		p.idealTotal += int64(req.tokens)
		p.requests = append(p.requests, req)
	}
	p.describe = fmt.Sprintf("%s: %d requests from %s (block size %d)", workloadTrace, len(p.requests), cfg.tracePath, bs)
	return p, nil
}

// truncate returns the first n tokens of a block piece. Text blocks are made of single-token
// pieces, so cutting after n pieces is exact.
func truncate(p piece, n int, m promptMaker) piece {
	if p.ids != nil || m.tb == nil {
		return piece{ids: p.ids[:n]}
	}
	return piece{text: m.tb.firstPieces(p.text, n)}
}
