package router

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/sglang"
	"github.com/kvgate/kvgate/api/tokenspeed"
	"github.com/kvgate/kvgate/api/vllm"
	"github.com/kvgate/kvgate/pkg/kvbridge"
	"github.com/kvgate/kvgate/pkg/openai"
)

// startGRPC serves register's services on a loopback port until the test ends.
func startGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

// fakeVLLM is an in-process vLLM engine servicer. Generate requests are published on reqs and
// answered by gen; Abort ids are published on aborts; SubscribeKvEvents is UNIMPLEMENTED (the
// embedded default) unless kv is set.
type fakeVLLM struct {
	vllm.UnimplementedVllmEngineServer
	reqs   chan *vllm.GenerateRequest
	aborts chan []string
	gen    func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error
}

func newFakeVLLM() *fakeVLLM {
	return &fakeVLLM{reqs: make(chan *vllm.GenerateRequest, 16), aborts: make(chan []string, 16)}
}

func (f *fakeVLLM) Generate(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	f.reqs <- r
	return f.gen(r, s)
}

func (f *fakeVLLM) HealthCheck(context.Context, *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	return &vllm.HealthCheckResponse{Healthy: true}, nil
}

func (f *fakeVLLM) GetModelInfo(context.Context, *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	return &vllm.GetModelInfoResponse{ServedModelName: "vllm-model", VocabSize: 256}, nil
}

func (f *fakeVLLM) GetLoads(context.Context, *vllm.GetLoadsRequest) (*vllm.GetLoadsResponse, error) {
	return &vllm.GetLoadsResponse{Loads: []*vllm.SchedulerLoad{{NumRunningReqs: 2, NumWaitingReqs: 3}, {DpRank: 1, NumRunningReqs: 1}}}, nil
}

func (f *fakeVLLM) Abort(_ context.Context, r *vllm.AbortRequest) (*vllm.AbortResponse, error) {
	f.aborts <- r.RequestIds
	return &vllm.AbortResponse{}, nil
}

func vChunk(idx uint32, prompt, cached uint32, toks ...uint32) *vllm.GenerateResponse {
	return &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
		TokenIds: toks, PromptTokens: prompt, CompletionTokens: uint32(len(toks)), CachedTokens: cached, Index: idx}}}
}

func vComplete(idx uint32, reason string, prompt, cached uint32, toks ...uint32) *vllm.GenerateResponse {
	return &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{
		OutputIds: toks, FinishReason: reason, PromptTokens: prompt, CompletionTokens: uint32(len(toks)), CachedTokens: cached, Index: idx}}}
}

// echoUpper answers like a vLLM engine: streaming, one chunk per prompt byte upper-cased, then
// a complete repeating the last delta; non-streaming, one complete per sample.
func echoUpper(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	ids := r.GetTokenized().GetInputIds()
	n := max(r.SamplingParams.N, 1)
	p := uint32(len(ids))
	for i := uint32(0); i < n; i++ {
		var out []uint32
		for _, id := range ids {
			out = append(out, uint32(strings.ToUpper(string(rune(id)))[0]))
		}
		if !r.Stream {
			if err := s.Send(vComplete(i, "length", p, 1, out...)); err != nil {
				return err
			}
			continue
		}
		for _, o := range out {
			if err := s.Send(vChunk(i, p, 1, o)); err != nil {
				return err
			}
		}
		if err := s.Send(vComplete(i, "", p, 1, out[len(out)-1])); err != nil {
			return err
		}
	}
	return nil
}

func TestGRPCVLLMNonStreaming(t *testing.T) {
	f := newFakeVLLM()
	f.gen = echoUpper
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	resp, body := g.post(t, `{"prompt":"abc","max_tokens":7,"temperature":0,"seed":42,"n":2,"stop":["x"]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status: got %d, want 200 (%s)", resp.StatusCode, body)
	}
	req := <-f.reqs
	sp := req.SamplingParams
	if got := req.GetTokenized().GetInputIds(); !cmp.Equal(got, []uint32{'a', 'b', 'c'}) {
		t.Errorf("input ids: got %v", got)
	}
	if sp.GetMaxTokens() != 7 || sp.GetTemperature() != 0 || sp.GetSeed() != 42 || sp.N != 2 || !cmp.Equal(sp.Stop, []string{"x"}) || !sp.SkipSpecialTokens || req.Stream {
		t.Errorf("sampling params: got %+v", sp)
	}
	var out openai.Completion
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Choices) != 2 || out.Choices[0].Text != "ABC" || out.Choices[1].Text != "ABC" || *out.Choices[0].FinishReason != "length" {
		t.Errorf("choices: got %s", body)
	}
	want := openai.Usage{PromptTokens: 3, CompletionTokens: 6, TotalTokens: 9, PromptTokensDetails: &openai.TokenDetails{CachedTokens: 1}}
	if d := cmp.Diff(want, *out.Usage); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
	if out.Object != "text_completion" || out.Model != "test-model" || !strings.HasPrefix(out.ID, "cmpl-") {
		t.Errorf("envelope: got %s", body)
	}
}

func TestGRPCVLLMStreaming(t *testing.T) {
	f := newFakeVLLM()
	f.gen = echoUpper
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	// No runtime in the spec: detected by probing HealthCheck.
	g := newTestGateway(t, testConfig{}, "grpc://"+addr)
	resp, body := g.post(t, `{"prompt":["ab","c"],"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	data := sseData(body)
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("last event: got %q, want [DONE]", data[len(data)-1])
	}
	texts := map[int]string{}
	finish := map[int]string{}
	var u *openai.Usage
	for _, d := range data[:len(data)-1] {
		var c openai.Completion
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if c.Usage != nil {
			u = c.Usage
			if len(c.Choices) != 0 {
				t.Errorf("usage chunk has choices: %q", d)
			}
			continue
		}
		for _, ch := range c.Choices {
			texts[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	// The streaming complete repeats the last delta; it must not be appended again.
	if d := cmp.Diff(map[int]string{0: "AB", 1: "C"}, texts); d != "" {
		t.Errorf("texts (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[int]string{0: "stop", 1: "stop"}, finish); d != "" {
		t.Errorf("finish reasons (-want +got):\n%s", d)
	}
	want := &openai.Usage{PromptTokens: 3, CompletionTokens: 3, TotalTokens: 6, PromptTokensDetails: &openai.TokenDetails{CachedTokens: 2}}
	if d := cmp.Diff(want, u); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
	if got := g.members()[0].Engine().Runtime(); got != "vllm" {
		t.Errorf("detected runtime: got %q, want vllm", got)
	}
}

func TestGRPCEngineLoadFromGetLoads(t *testing.T) {
	f := newFakeVLLM()
	f.gen = echoUpper
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{EngineMetricsInterval: 10 * time.Millisecond}, "url=grpc://"+addr+",runtime=vllm,kv_events=off")
	w := g.rt.Fleet().Workers()[0]
	g.waitFor(t, "engine load from GetLoads", func() bool { n, _, ok := w.EngineLoad(); return ok && n == 6 })
}

func TestGRPCClientDropAborts(t *testing.T) {
	f := newFakeVLLM()
	sent := make(chan struct{})
	f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		if err := s.Send(vChunk(0, 1, 0, 'z')); err != nil {
			return err
		}
		close(sent)
		<-s.Context().Done()
		return s.Context().Err()
	}
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"a","stream":true}`))
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	gr := <-f.reqs
	cancel()
	resp.Body.Close()
	select {
	case ids := <-f.aborts:
		if !cmp.Equal(ids, []string{gr.RequestId}) {
			t.Errorf("abort ids: got %v, want [%s]", ids, gr.RequestId)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("no Abort after the client dropped")
	}
}

func TestGRPCErrorBeforeFirstByteMapsStatus(t *testing.T) {
	f := newFakeVLLM()
	f.gen = func(*vllm.GenerateRequest, grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		return status.Error(codes.InvalidArgument, "prompt too long for engine")
	}
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	resp, body := g.post(t, `{"prompt":"a"}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(openAIError(t, body).Message, "prompt too long") {
		t.Errorf("got %d %s, want 400 with the engine's message", resp.StatusCode, body)
	}
}

func TestGRPCErrorMidStreamEndsWithErrorEvent(t *testing.T) {
	f := newFakeVLLM()
	f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		if err := s.Send(vChunk(0, 1, 0, 'q')); err != nil {
			return err
		}
		return status.Error(codes.Internal, "engine crashed")
	}
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	_, body := g.post(t, `{"prompt":"a","stream":true}`)
	data := sseData(body)
	if len(data) != 2 || !strings.Contains(data[0], `"text":"q"`) {
		t.Fatalf("events: got %q", data)
	}
	if e := openAIError(t, data[1]); !strings.Contains(e.Message, "engine crashed") {
		t.Errorf("error event: got %q", data[1])
	}
}

// fakeSGLang answers with cumulative chunk counts (wire/smg-grpc.md §7.2). A decode fake of a
// pair sets after to its prefill fake: it answers only once that one has its request, as a real
// decode engine waits for the KV (else the pair could end and cancel the prefill leg unsent).
type fakeSGLang struct {
	sglang.UnimplementedSglangSchedulerServer
	reqs  chan *sglang.GenerateRequest
	after *fakeSGLang
	got   chan struct{} // closed on the first request when not nil
	once  sync.Once
}

func (f *fakeSGLang) HealthCheck(context.Context, *sglang.HealthCheckRequest) (*sglang.HealthCheckResponse, error) {
	return &sglang.HealthCheckResponse{Healthy: true}, nil
}

func (f *fakeSGLang) Generate(r *sglang.GenerateRequest, s grpc.ServerStreamingServer[sglang.GenerateResponse]) error {
	f.reqs <- r
	if f.got != nil {
		f.once.Do(func() { close(f.got) })
	}
	if f.after != nil {
		select {
		case <-f.after.got:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
	toks := []uint32{'x', 'y', 'z'}
	for i, tk := range toks {
		if err := s.Send(&sglang.GenerateResponse{Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{
			TokenIds: []uint32{tk}, PromptTokens: 4, CompletionTokens: uint32(i + 1), CachedTokens: 3}}}); err != nil {
			return err
		}
	}
	return s.Send(&sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{
		OutputIds: []uint32{'z'}, FinishReason: "stop", PromptTokens: 4, CompletionTokens: 3, CachedTokens: 3}}})
}

// fakeTokenSpeed answers non-streaming requests.
type fakeTokenSpeed struct {
	tokenspeed.UnimplementedTokenSpeedSchedulerServer
	reqs chan *tokenspeed.GenerateRequest
}

func (f *fakeTokenSpeed) HealthCheck(context.Context, *tokenspeed.HealthCheckRequest) (*tokenspeed.HealthCheckResponse, error) {
	return &tokenspeed.HealthCheckResponse{Healthy: true}, nil
}

func (f *fakeTokenSpeed) Generate(r *tokenspeed.GenerateRequest, s grpc.ServerStreamingServer[tokenspeed.GenerateResponse]) error {
	f.reqs <- r
	return s.Send(&tokenspeed.GenerateResponse{Response: &tokenspeed.GenerateResponse_Complete{Complete: &tokenspeed.GenerateComplete{
		OutputIds: []uint32{'o', 'k'}, FinishReason: "length", PromptTokens: 2, CompletionTokens: 2}}})
}

func TestGRPCSGLangAndTokenSpeed(t *testing.T) {
	sg := &fakeSGLang{reqs: make(chan *sglang.GenerateRequest, 4)}
	ts := &fakeTokenSpeed{reqs: make(chan *tokenspeed.GenerateRequest, 4)}
	sgAddr := startGRPC(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, sg) })
	tsAddr := startGRPC(t, func(s *grpc.Server) { tokenspeed.RegisterTokenSpeedSchedulerServer(s, ts) })
	t.Run("sglang streaming cumulative", func(t *testing.T) {
		g := newTestGateway(t, testConfig{}, "url=grpc://"+sgAddr+",runtime=sglang,kv_events=off")
		_, body := g.post(t, `{"prompt":"abcd","stream":true,"stream_options":{"include_usage":true},"top_p":0.5}`)
		var text string
		var u *openai.Usage
		for _, d := range sseData(body) {
			if d == "[DONE]" {
				continue
			}
			var c openai.Completion
			json.Unmarshal([]byte(d), &c)
			for _, ch := range c.Choices {
				text += ch.Text
			}
			if c.Usage != nil {
				u = c.Usage
			}
		}
		if text != "xyz" || u == nil || u.CompletionTokens != 3 || u.PromptTokens != 4 || u.PromptTokensDetails.CachedTokens != 3 {
			t.Errorf("got text %q usage %+v", text, u)
		}
		r := <-sg.reqs
		if r.SamplingParams.TopP != 0.5 || r.SamplingParams.TopK != -1 || r.SamplingParams.Temperature != 1 || r.SamplingParams.GetMaxNewTokens() != openai.DefaultCompletionMaxTokens || !r.Stream {
			t.Errorf("sglang sampling params: got %+v", r.SamplingParams)
		}
	})
	t.Run("tokenspeed non-streaming", func(t *testing.T) {
		g := newTestGateway(t, testConfig{}, "url=grpc://"+tsAddr+",runtime=tokenspeed,kv_events=off")
		resp, body := g.post(t, `{"prompt":[1,2],"seed":7}`)
		if resp.StatusCode != 200 || !strings.Contains(body, `"text":"ok"`) || !strings.Contains(body, `"finish_reason":"length"`) {
			t.Errorf("got %d %s", resp.StatusCode, body)
		}
		r := <-ts.reqs
		if !cmp.Equal(r.Tokenized.InputIds, []uint32{1, 2}) || r.SamplingParams.GetSamplingSeed() != 7 || r.SamplingParams.GetTopK() != -1 {
			t.Errorf("tokenspeed request: got %+v", r)
		}
	})
}

func TestGRPCUnimplementedEventsFallBackToTree(t *testing.T) {
	f := newFakeVLLM()
	f.gen = echoUpper
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	m := g.members()[0]
	g.waitFor(t, "event stream unavailable", func() bool {
		st, ok := m.StreamState()
		return ok && st == kvbridge.StreamUnavailable
	})
	if m.EventFed() {
		t.Errorf("worker answering UNIMPLEMENTED is still event-fed")
	}
	if ok, reason := g.rt.Fleet().Ready(); !ok {
		t.Errorf("readiness with an unavailable stream: got not ready (%s), want ready", reason)
	}
}

func TestUpstreamTimeoutMidStream(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		f := newFakeVLLM()
		f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
			if err := s.Send(vChunk(0, 1, 0, 'a')); err != nil {
				return err
			}
			<-s.Context().Done() // stalls until the gateway gives up
			return s.Context().Err()
		}
		addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
		g := newTestGateway(t, testConfig{UpstreamTimeout: 200 * time.Millisecond}, "url=grpc://"+addr+",runtime=vllm,kv_events=off")
		_, body := g.post(t, `{"prompt":"a","stream":true}`)
		data := sseData(body)
		if len(data) != 2 || openAIError(t, data[1]).Code == nil || *openAIError(t, data[1]).Code != "upstream_timeout" {
			t.Errorf("events: got %q, want a chunk then an upstream_timeout error", data)
		}
		select {
		case <-f.aborts:
		case <-time.After(defaultTestTimeout):
			t.Error("no Abort after the timeout")
		}
	})
	t.Run("http", func(t *testing.T) {
		fw := newFakeWorker(t, "m")
		fw.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: {}\n\n"))
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		}
		g := newTestGateway(t, testConfig{UpstreamTimeout: 200 * time.Millisecond}, fw.url())
		_, body := g.post(t, `{"prompt":"a","stream":true}`)
		data := sseData(body)
		if len(data) != 2 || *openAIError(t, data[1]).Code != "upstream_timeout" {
			t.Errorf("events: got %q, want a chunk then an upstream_timeout error", data)
		}
	})
}

// AbortInFlight (a shutdown past its drain deadline) ends started streams with one
// gateway_shutting_down error event and answers unanswered requests with 503.
func TestAbortInFlight(t *testing.T) {
	type answer struct {
		status int
		body   string
	}
	// run posts body in the background, aborts once the worker has started (for a stream: once
	// the client has its first event), and returns the gateway's answer.
	run := func(t *testing.T, g *testGateway, body string, started <-chan struct{}) answer {
		t.Helper()
		stream := strings.Contains(body, `"stream":true`)
		first := make(chan struct{})
		done := make(chan answer, 1)
		go func() {
			defer close(first)
			resp, err := g.srv.Client().Post(g.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				done <- answer{status: -1, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			if stream {
				br := bufio.NewReader(resp.Body)
				line, _ := br.ReadString('\n')
				b.WriteString(line)
				first <- struct{}{}
				rest, _ := io.ReadAll(br)
				b.Write(rest)
			} else {
				rest, _ := io.ReadAll(resp.Body)
				b.Write(rest)
			}
			done <- answer{status: resp.StatusCode, body: b.String()}
		}()
		wait := started
		if stream {
			wait = first
		}
		select {
		case <-wait:
		case <-time.After(defaultTestTimeout):
			t.Fatal("request never started")
		}
		g.rt.AbortInFlight()
		select {
		case a := <-done:
			return a
		case <-time.After(defaultTestTimeout):
			t.Fatal("request still running after AbortInFlight")
		}
		return answer{}
	}
	wantShutdownEvent := func(t *testing.T, a answer) {
		t.Helper()
		data := sseData(a.body)
		if a.status != http.StatusOK || len(data) != 2 {
			t.Fatalf("got %d %q, want 200 with a chunk then an error event", a.status, data)
		}
		if c := openAIError(t, data[1]).Code; c == nil || *c != "gateway_shutting_down" {
			t.Errorf("error event %q: want code gateway_shutting_down", data[1])
		}
	}
	stalledHTTP := func(stream bool, started chan struct{}) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Write([]byte("data: {}\n\n"))
				http.NewResponseController(w).Flush()
			}
			close(started)
			<-r.Context().Done()
		}
	}
	t.Run("http stream", func(t *testing.T) {
		fw := newFakeWorker(t, "m")
		started := make(chan struct{})
		fw.handle = stalledHTTP(true, started)
		g := newTestGateway(t, testConfig{}, fw.url())
		wantShutdownEvent(t, run(t, g, `{"prompt":"a","stream":true}`, started))
		// Requests after the abort are refused the same way.
		resp, body := g.post(t, `{"prompt":"a"}`)
		if resp.StatusCode != http.StatusServiceUnavailable || *openAIError(t, body).Code != "gateway_shutting_down" {
			t.Errorf("request after the abort: got %d %s, want 503 gateway_shutting_down", resp.StatusCode, body)
		}
	})
	t.Run("http not answered yet", func(t *testing.T) {
		fw := newFakeWorker(t, "m")
		started := make(chan struct{})
		fw.handle = stalledHTTP(false, started)
		g := newTestGateway(t, testConfig{}, fw.url())
		a := run(t, g, `{"prompt":"a"}`, started)
		if a.status != http.StatusServiceUnavailable || *openAIError(t, a.body).Code != "gateway_shutting_down" {
			t.Errorf("got %d %s, want 503 gateway_shutting_down", a.status, a.body)
		}
		if !g.rt.Fleet().Workers()[0].Healthy() {
			t.Error("the worker was marked down by the gateway's own shutdown")
		}
	})
	t.Run("grpc stream", func(t *testing.T) {
		f := newFakeVLLM()
		started := make(chan struct{})
		f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
			if err := s.Send(vChunk(0, 1, 0, 'a')); err != nil {
				return err
			}
			close(started)
			<-s.Context().Done()
			return s.Context().Err()
		}
		addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
		g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm,kv_events=off")
		wantShutdownEvent(t, run(t, g, `{"prompt":"a","stream":true}`, started))
		select {
		case <-f.aborts:
		case <-time.After(defaultTestTimeout):
			t.Error("no Abort sent to the engine")
		}
	})
}

// TestGRPCStopStrings: the engine stops at a stop string, but its token ids still spell it;
// the gateway cuts the text before it, streaming or not (as vLLM's own detokenizer does).
func TestGRPCStopStrings(t *testing.T) {
	f := newFakeVLLM()
	f.gen = func(r *vllm.GenerateRequest, s grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
		out := []uint32{}
		for _, c := range "hello STOP" {
			out = append(out, uint32(c))
		}
		if !r.Stream {
			return s.Send(vComplete(0, "stop", 3, 0, out...))
		}
		for _, o := range out {
			if err := s.Send(vChunk(0, 3, 0, o)); err != nil {
				return err
			}
		}
		return s.Send(vComplete(0, "stop", 3, 0, out[len(out)-1]))
	}
	addr := startGRPC(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, f) })
	g := newTestGateway(t, testConfig{}, "url=grpc://"+addr+",runtime=vllm")
	_, body := g.post(t, `{"prompt":"abc","max_tokens":20,"stop":["STOP"]}`)
	var out openai.Completion
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("body %s: %v", body, err)
	}
	if got := out.Choices[0].Text; got != "hello " {
		t.Errorf("non-streaming text: got %q, want %q", got, "hello ")
	}
	_, body = g.post(t, `{"prompt":"abc","max_tokens":20,"stop":["STOP"],"stream":true}`)
	var text strings.Builder
	for _, d := range sseData(body) {
		if d == "[DONE]" {
			continue
		}
		var c openai.Completion
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
		}
	}
	if text.String() != "hello " {
		t.Errorf("streamed text: got %q, want %q", text.String(), "hello ")
	}
}
