package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The messages workload: loadgen's coding-agent sessions on Anthropic's /v1/messages, each
// turn resending the conversation with a shared ~2k-token system prompt and five tool
// definitions. Its simulators are the responses rows' (the reply file that calls a tool every
// other generation, Qwen3's reasoning and Hermes tool-call parsers); the gateway converts
// each request into its chat request, so the simulators serve /v1/chat/completions. The API is
// stateless, so several gateways need no shared store.

// workloadMessages labels loadgen's messages workload.
const workloadMessages = "messages"

// defaultMessages: 200 sessions of 6 turns (1200 requests, as chat and responses) over a
// 2000-token system prompt, 150-token user turns and 100-token tool results, 5 sessions (30
// requests) per second; with the scripted answers a session's last prompt is about 3k tokens.
var defaultMessages = respWorkload{requests: 1200, turns: 6, systemTok: 2000, userTok: 150, toolTok: 100, outputTok: 128, rate: 5}

// messagesFleet sets f up for the messages workload: the simulators' script and parsers.
func (r *runner) messagesFleet(f *fleet) error {
	var err error
	f.simArgs, err = agentSimArgs(r.l.LogDir)
	return err
}

// messagesLoadgenArgs are loadgen's workload flags of a messages row.
func (r *runner) messagesLoadgenArgs() []string {
	w := r.o.msg
	return []string{"--tokenizer", filepath.Dir(r.l.Tokenizer), "--workload", workloadMessages,
		"--num-requests", fmt.Sprint(w.requests), "--turns", fmt.Sprint(w.turns), "--system-tokens", fmt.Sprint(w.systemTok),
		"--user-tokens", fmt.Sprint(w.userTok), "--tool-tokens", fmt.Sprint(w.toolTok), "--output-tokens", fmt.Sprint(w.outputTok),
		"--rate", fmt.Sprint(w.rate)}
}

// messagesParagraph states each messages row's hit rate against the ideal.
func messagesParagraph(rs []result) string {
	var lines []string
	for _, r := range rs {
		if r.IdealHitRate == nil || *r.IdealHitRate == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s hit (%.2f × its ideal %s), TTFT mean %s.", rowName(r), pct(r.hit()), r.hit() / *r.IdealHitRate, pct(*r.IdealHitRate), fmtMS(r.TTFTms.Mean)))
	}
	return "Every turn resends the whole conversation; the gateway converts it into the chat request vLLM's Anthropic serving runs and routes on its rendered ids, so a turn hits where the session's earlier turns ran, and every session's first turn where the shared system prompt and tools are cached. " + strings.Join(lines, " ")
}
