package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// session is one multi-turn chat conversation. Turn k's prompt is the shared system prompt,
// then every earlier user message followed by the answer to it, then user message k; so each
// turn extends the previous turn's context, as a chat front end resends the conversation.
type session struct {
	id    int
	at    time.Duration // start, simulated time
	first int           // global index of the first turn's result slot
	users []piece       // one user message per turn
	// replies stand in for the answers in token-id mode, where the streamed text cannot be
	// turned back into the engine's token ids; in text mode the real answer text is used.
	replies []piece
}

// genChat builds ceil(numRequests / turns) sessions of up to `turns` turns (numRequests turns
// in total) over one shared system prompt of systemTokens tokens; user messages are
// userTokens tokens; sessions start as an open loop at rate sessions per second.
func genChat(cfg genConfig, m promptMaker) (*plan, error) {
	if cfg.numRequests < 1 || cfg.turns < 1 || cfg.userTokens < 1 || cfg.systemTokens < 0 || cfg.outputTokens < 1 {
		return nil, fmt.Errorf("loadgen: chat needs requests ≥ 1, turns ≥ 1, user tokens ≥ 1, output tokens ≥ 1")
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x63686174)) // "chat"
	n := (cfg.numRequests + cfg.turns - 1) / cfg.turns
	at := arrivals(rng, n, cfg.rate, cfg.burstiness)
	p := &plan{system: m.make(rng, cfg.systemTokens), systemTokens: cfg.systemTokens,
		thinkTime: cfg.thinkTime, outputTokens: cfg.outputTokens}
	next := 0
	for s := range n {
		turns := min(cfg.turns, cfg.numRequests-next)
		sess := &session{id: s, at: at[s], first: next}
		for range turns {
			sess.users = append(sess.users, m.make(rng, cfg.userTokens))
			if m.tb == nil {
				sess.replies = append(sess.replies, m.make(rng, cfg.outputTokens))
			}
		}
		next += turns
		p.sessions = append(p.sessions, sess)
	}
	p.describe = fmt.Sprintf("%s: %d sessions, %d requests, up to %d turns, %d-token system prompt, %d-token user turns, %d output tokens",
		workloadChat, n, cfg.numRequests, cfg.turns, cfg.systemTokens, cfg.userTokens, cfg.outputTokens)
	return p, nil
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
