package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvgate/kvgate/internal/harness"
)

// The responses workload: loadgen's agent sessions on /v1/responses (each turn by
// previous_response_id, a function tool the simulators are scripted to call every other
// generation). Its simulators run with a reply file and Qwen3's reasoning and Hermes tool-call
// parsers, as vLLM serves an agent model; with more than one gateway the replicas share a
// Redis store (a redis-server the bench starts per row), as they must for a follow-up to land
// on any of them.

// workloadResponses labels loadgen's responses workload.
const workloadResponses = "responses"

// respWorkload sizes loadgen's responses workload.
type respWorkload struct {
	requests, turns, systemTok, userTok, toolTok, outputTok int
	// rate is sessions per simulated second.
	rate float64
}

// defaultResponses: 200 sessions of 6 turns (1200 requests, as chat) with 500-token
// instructions, 150-token user turns and 100-token tool results, 5 sessions (30 requests) per
// second; the scripted answers (agentReplies) are a tool call of about 40 tokens and a final
// answer of about 15, so a session's last prompt is about 1.5k tokens, as chat's.
var defaultResponses = respWorkload{requests: 1200, turns: 6, systemTok: 500, userTok: 150, toolTok: 100, outputTok: 128, rate: 5}

// agentReplies script the simulators: generation n answers reply n mod 2, a tool call with its
// reasoning, then the answer once the tool has run.
var agentReplies = []string{
	"<think>\nThe user needs a fact I do not have; I should look it up.\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"query\": \"the fact the user asks about\"}}\n</tool_call>",
	"The knowledge base says so: the answer is yes, as of this year.",
}

// agentSimArgs are the simulator flags of the responses rows; the reply file is written under
// dir.
func agentSimArgs(dir string) ([]string, error) {
	var b strings.Builder
	for _, r := range agentReplies {
		q, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		b.Write(q)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "agent-replies.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return []string{"--reply-file", path, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"}, nil
}

// agentFleet sets f up for the responses workload: the simulators' script and parsers and,
// for several gateways, a Redis store they share.
func (r *runner) agentFleet(ctx context.Context, f *fleet, c configuration, tag string) error {
	var err error
	if f.simArgs, err = agentSimArgs(r.l.LogDir); err != nil {
		return err
	}
	if c.Gateways > 1 {
		url, err := r.startRedis(ctx, f, tag)
		if err != nil {
			return err
		}
		f.gwArgs = []string{"--responses-store", url}
	}
	return nil
}

// responsesLoadgenArgs are loadgen's workload flags of a responses row.
func (r *runner) responsesLoadgenArgs() []string {
	w := r.o.resp
	return []string{"--tokenizer", filepath.Dir(r.l.Tokenizer), "--workload", workloadResponses,
		"--num-requests", fmt.Sprint(w.requests), "--turns", fmt.Sprint(w.turns), "--system-tokens", fmt.Sprint(w.systemTok),
		"--user-tokens", fmt.Sprint(w.userTok), "--tool-tokens", fmt.Sprint(w.toolTok), "--output-tokens", fmt.Sprint(w.outputTok),
		"--rate", fmt.Sprint(w.rate)}
}

// redisStartTimeout bounds a redis-server's start.
const redisStartTimeout = 15 * time.Second

// startRedis starts a redis-server for f's gateways on a free loopback port, persisting
// nothing, and returns its URL once it answers PING.
func (r *runner) startRedis(ctx context.Context, f *fleet, tag string) (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found (tools/deps.sh test installs it): %w", err)
	}
	port, err := harness.FreeTCPPort()
	if err != nil {
		return "", err
	}
	p, err := harness.Start(harness.Command{Name: tag + "-redis", Path: bin, Args: []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}}, r.l.LogDir)
	if err != nil {
		return "", err
	}
	f.procs = append(f.procs, p)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	for {
		if redisPing(addr) == nil {
			return "redis://" + addr + "/0", nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redis-server on %s did not answer PING: %w\n%s", addr, ctx.Err(), p.LogTail(2000))
		case <-p.Done():
			return "", fmt.Errorf("redis-server exited:\n%s", p.LogTail(2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redisPing sends PING to the Redis at addr and checks the answer.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}

// responsesParagraph states each responses row's hit rate against the ideal.
func responsesParagraph(rs []result) string {
	var lines []string
	for _, r := range rs {
		if r.IdealHitRate == nil || *r.IdealHitRate == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s hit (%.2f × its ideal %s), TTFT mean %s.", rowName(r), pct(r.hit()), r.hit() / *r.IdealHitRate, pct(*r.IdealHitRate), fmtMS(r.TTFTms.Mean)))
	}
	return "Each turn sends only its new input and the previous response's id; the gateway expands the stored chain into the whole conversation and routes on it, so a turn hits where the session's earlier turns ran, on any replica (the replicas share the Redis store). " + strings.Join(lines, " ")
}
