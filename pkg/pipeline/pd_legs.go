package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/pkg/engine"
	"github.com/kvgate/kvgate/pkg/fleet"
	"github.com/kvgate/kvgate/pkg/openai"
	"github.com/kvgate/kvgate/pkg/worker"
)

// The two legs of a pair, per transfer style (wire/pd.md §§2, 4).

// nixlPrefillParams is the prefill leg's kv_transfer_params: the union of the peers' (the
// toy proxy's and llm-d's null keys included; wire/pd.md §2.1).
var nixlPrefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// prefillEdits returns the edits of a vLLM (NIXL or Mooncake) prefill leg of c with
// kv_transfer_params kv, after base (the stripped client fields): one token, not streamed, one
// sample, no minimum.
func prefillEdits(c *Call, base openai.Edits, kv json.RawMessage) openai.Edits {
	one := json.RawMessage(`1`)
	e := append(slices.Clip(base),
		openai.Edit{Key: "kv_transfer_params", Value: kv},
		openai.Edit{Key: "stream", Value: json.RawMessage(`false`)},
		openai.Edit{Key: "stream_options"},
		openai.Edit{Key: "max_tokens", Value: one},
		openai.Edit{Key: "min_tokens"},
		openai.Edit{Key: "min_completion_tokens"},
	)
	has := func(string) bool { return false }
	switch {
	case c.Req.Completion != nil:
		has = c.Req.Completion.Has
	case c.Req.Chat != nil:
		has = c.Req.Chat.Has
	}
	for _, k := range []string{"max_completion_tokens", "n"} {
		if has(k) {
			e = append(e, openai.Edit{Key: k, Value: one})
		}
	}
	return e
}

// kvParams returns the kv_transfer_params object of a prefill answer verbatim, or nil when it
// has none (a finish other than by length or stop: wire/pd.md §2.2).
func kvParams(body []byte) json.RawMessage {
	var v struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.KV) == 0 || v.KV[0] != '{' {
		return nil
	}
	return v.KV
}

// pairNIXL runs a vLLM NIXL pair: the prefill leg (retried once on another prefill worker),
// then the decode leg with the params the prefill answer returned. It reports false, having
// released the prefill worker, when every prefill try failed and the request is to run whole
// on the decode worker.
func (pl *Pipeline) pairNIXL(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, s *routeScratch, ddec, pdec *Decision, hdr http.Header) bool {
	tokens := c.RouteTokens()
	p := c.Req
	p.Header, p.Edits = hdr, prefillEdits(c, c.Req.Edits, nixlPrefillParams)
	p.PD = &engine.PDLeg{Prefill: true, KVTransferParams: nixlPrefillParams} // for a grpc:// worker
	var params json.RawMessage
	for attempt := 0; ; attempt++ {
		pdec.record(tokens)
		pctx, cancel := context.WithTimeout(ctx, c.Served.pd.timeout)
		kv, other, aerr := pl.callPrefill(pctx, c, pdec, &p)
		cancel()
		pl.done(c, pdec)
		if other != nil { // the engine's verdict on the request: the client's answer
			pl.done(c, ddec)
			pl.countPD(w, c, pdPair)
			writePrefillAnswer(w, pdec, other)
			return true
		}
		if aerr != nil && aerr.Status/100 == 4 && ctx.Err() == nil {
			// A grpc:// engine's verdict on the request (INVALID_ARGUMENT, RESOURCE_EXHAUSTED),
			// as an HTTP engine's 4xx answer above.
			pl.done(c, ddec)
			pl.countPD(w, c, pdPair)
			w.Header().Set(HeaderPrefillWorker, pdec.m.Worker().URL())
			ep.writeError(w, aerr)
			return true
		}
		if aerr == nil {
			params = kv
			break
		}
		if !pl.sendFailed(ctx, w, ep, pdec, aerr) {
			pl.done(c, ddec)
			return true
		}
		if attempt == 0 && retryable(aerr) && pl.reroutePrefill(s, pdec, c, ddec, PDTransferNIXL) {
			continue
		}
		pl.countPD(w, c, pdPrefillFailed)
		return false
	}
	w.Header().Set(HeaderPrefillWorker, pdec.m.Worker().URL())
	d := *c
	d.Req.Header = hdr
	if params == nil {
		// EOS at the first token, or an engine without the connector: the decode worker
		// prefills itself (SMG's behaviour), and the metric says so.
		pl.countPD(w, c, pdPair)
		pl.met.pdNoParams.Inc()
		pl.sendDecode(ctx, w, ddec, &d, ep)
		return true
	}
	d.Req.Edits = append(slices.Clip(c.Req.Edits), openai.Edit{Key: "kv_transfer_params", Value: params})
	d.Req.PD = &engine.PDLeg{KVTransferParams: params}
	w.Header().Set(HeaderPD, pdPair)
	whole := d
	whole.Req.Edits, whole.Req.PD = c.Req.Edits, nil
	pl.decodeNIXL(ctx, w, ddec, &d, &whole, ep)
	return true
}

// decodeNIXL sends a NIXL pair's decode leg d and answers the client with it. A decode engine
// that answers a server error before anything reached the client is taken to have failed the
// transfer (vLLM's default kv_load_failure_policy "fail" ends a request whose KV read failed:
// the prefill worker died after answering, or its lease expired), and the request runs whole
// on the same worker (whole: d without the params), which prefills it itself: the fallback
// for a failed prefill worker, counted as transfer_failed. An unreachable decode worker is
// not retried. The whole run's answer, whatever it is, is the client's.
func (pl *Pipeline) decodeNIXL(ctx context.Context, w http.ResponseWriter, ddec *Decision, d, whole *Call, ep *Endpoint) {
	ddec.record(d.RouteTokens())
	d.leg = legNameDecode
	started, err := pl.send(ctx, w, ddec, d, ep, 0)
	if err != nil && !started && transferFailed(err) && ctx.Err() == nil {
		pl.met.upstream.WithLabelValues(ddec.m.Worker().URL(), "before_first_byte").Inc()
		pl.countPD(w, d, pdTransferFailed)
		started, err = pl.send(ctx, w, ddec, whole, ep, 1)
	} else {
		pl.countPD(w, d, pdPair)
	}
	pl.done(d, ddec)
	if err == nil || started {
		return
	}
	if pl.sendFailed(ctx, w, ep, ddec, err) {
		out := *err
		out.Message = "decode worker " + ddec.m.Worker().URL() + " failed: " + err.Message
		ep.writeError(w, &out)
	}
}

// transferFailed reports whether a decode leg's failure before answering is the engine
// failing the request (as after a failed KV read) rather than the worker being unreachable:
// an HTTP engine's 5xx answer is upstream_error (engine.HTTP), a gRPC engine's failed request
// INTERNAL; a transport failure is upstream_unreachable or UNAVAILABLE.
func transferFailed(err *openai.Error) bool {
	return err.Code == "upstream_error" || err.Code == codes.Internal.String()
}

// writePrefillAnswer gives the client a prefill leg's non-2xx answer as the engine wrote it.
func writePrefillAnswer(w http.ResponseWriter, pdec *Decision, a *prefillAnswer) {
	h := w.Header()
	h.Set(HeaderPrefillWorker, pdec.m.Worker().URL())
	if ct := a.header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// sendDecode sends a pair's decode leg d on ddec's worker and answers the client with it.
func (pl *Pipeline) sendDecode(ctx context.Context, w http.ResponseWriter, ddec *Decision, d *Call, ep *Endpoint) {
	started, err, pe := pl.decodeLeg(ctx, w, ddec, d, ep, nil)
	pl.done(d, ddec)
	pl.decodeFailed(ctx, w, ep, ddec, started, err, pe)
}

// decodeLeg sends a pair's decode leg d on ddec's worker, answering the client with it, and
// leaves ddec held. ended, when set, runs as soon as the call has ended, told whether it
// failed before answering (concurrent pairs: it ends the prefill leg, and returns the prefill
// leg's own failure, if any, for the client). It returns whether anything reached the client,
// the leg's failure, and the failure to answer for it (pe: ended's, or that of a failed prefill
// leg that ended this one: legCause), which decodeFailed writes.
func (pl *Pipeline) decodeLeg(ctx context.Context, w http.ResponseWriter, ddec *Decision, d *Call, ep *Endpoint, ended func(failed bool) *openai.Error) (started bool, err, pe *openai.Error) {
	ddec.record(d.RouteTokens())
	d.leg = legNameDecode
	started, err = pl.send(ctx, w, ddec, d, ep, 0)
	if ended != nil {
		pe = ended(err != nil && !started)
	}
	if err != nil && !started && pe == nil {
		pe = legCause(ctx)
	}
	return started, err, pe
}

// decodeFailed answers the client for a decode leg that failed before answering (err, pe as
// decodeLeg returned them); it does nothing when the leg answered.
func (pl *Pipeline) decodeFailed(ctx context.Context, w http.ResponseWriter, ep *Endpoint, ddec *Decision, started bool, err, pe *openai.Error) {
	if err == nil || started {
		return
	}
	if pe != nil {
		ep.writeError(w, pe)
		return
	}
	if pl.sendFailed(ctx, w, ep, ddec, err) {
		out := *err
		out.Message = "decode worker " + ddec.m.Worker().URL() + " failed: " + err.Message
		ep.writeError(w, &out)
	}
}

// bootstrapRooms draws a pair's bootstrap rooms, one per output (wire/pd.md §4.1): random
// 63-bit ones; when a leg is a grpc:// worker, consecutive ones from a random first one below
// engine.SGLangRoomLimit, as the engine numbers a request's prompts from its first room
// (SGLang's room is an int32), so that both legs name the same rooms.
func bootstrapRooms(c *Call, grpcLeg bool, rand func() uint64) []uint64 {
	items := 1
	switch {
	case c.Req.Chat != nil:
		items = c.Req.Chat.N
	case c.Req.Completion != nil:
		items = len(c.Req.Completion.Prompts)
	}
	rooms := make([]uint64, max(items, 1))
	var first uint64
	if grpcLeg {
		first = rand() % engine.SGLangRoomLimit
	}
	for i := range rooms {
		if grpcLeg {
			rooms[i] = (first + uint64(i)) % engine.SGLangRoomLimit
		} else {
			rooms[i] = rand() & (1<<63 - 1)
		}
	}
	return rooms
}

// bootstrapEdits returns the SGLang bootstrap fields of a pair whose prefill worker is pw, for
// rooms, after base (arrays for several outputs: wire/pd.md §4.1).
func bootstrapEdits(pw *worker.Worker, rooms []uint64, base openai.Edits) openai.Edits {
	host, port := bootstrapHost(pw), bootstrapPort(pw)
	e := slices.Clip(base)
	if len(rooms) <= 1 {
		return append(e, openai.Edit{Key: "bootstrap_host", Value: rawJSON(host)}, openai.Edit{Key: "bootstrap_port", Value: rawJSON(port)},
			openai.Edit{Key: "bootstrap_room", Value: rawJSON(rooms[0])})
	}
	hosts, ports := make([]string, len(rooms)), make([]int, len(rooms))
	for i := range rooms {
		hosts[i], ports[i] = host, port
	}
	return append(e, openai.Edit{Key: "bootstrap_host", Value: rawJSON(hosts)}, openai.Edit{Key: "bootstrap_port", Value: rawJSON(ports)},
		openai.Edit{Key: "bootstrap_room", Value: rawJSON(rooms)})
}

// bootstrapPort returns a prefill worker's bootstrap port: its spec's, else SGLang's default
// (a both worker as the prefill worker).
func bootstrapPort(pw *worker.Worker) int {
	if port := pw.Spec().BootstrapPort; port != 0 {
		return port
	}
	return worker.DefaultBootstrapPort
}

// pairSGLang runs an SGLang pair: both legs at once with the same bootstrap fields, the
// decode answer relayed (pairConcurrent; its result is pairConcurrent's).
func (pl *Pipeline) pairSGLang(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, ddec, pdec *Decision, hdr http.Header) *pairFailure {
	pw := pdec.m.Worker()
	rooms := bootstrapRooms(c, pw.Kind() == worker.KindGRPC || ddec.m.Worker().Kind() == worker.KindGRPC, pl.rand)
	edits := bootstrapEdits(pw, rooms, c.Req.Edits)
	leg := &engine.PDLeg{Bootstrap: &engine.Bootstrap{Host: bootstrapHost(pw), Port: bootstrapPort(pw), Room: rooms[0]}}
	p := c.Req
	p.Header, p.Edits, p.PD = hdr, edits, leg
	d := *c
	d.Req.Header, d.Req.Edits, d.Req.PD = hdr, edits, leg
	return pl.pairConcurrent(ctx, w, c, ep, ddec, pdec, &p, &d, nil)
}

// pairConcurrent sends a pair's prefill leg p and decode leg d at once (SGLang, Mooncake: the
// decode engine waits for the KV) and answers the client with the decode leg. Either leg
// failing ends the other: a failed prefill cancels the decode leg at once (which would
// otherwise wait for the KV for minutes), a failed decode cancels the prefill leg; the prefill
// leg is bounded by the PD timeout. onFail, when set, runs when either leg fails.
//
// A pair that failed before anything reached the client is not answered when the caller may
// do better: pairConcurrent returns the failure with ddec still held. A prefill leg that failed
// with a server error, a transport error or the PD timeout may run again on another prefill
// worker (a fresh room or transfer id: the decode leg that joined the failed one has been
// ended) or the request whole; a decode leg that failed the transfer while the prefill leg did
// not fail (the engine's server error: its KV read failed) may run the request whole.
// Otherwise it returns nil, having answered the client and released ddec. pdec is released
// either way.
func (pl *Pipeline) pairConcurrent(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, ddec, pdec *Decision, p *engine.Request, d *Call, onFail func()) *pairFailure {
	w.Header().Set(HeaderPD, pdPair)
	w.Header().Set(HeaderPrefillWorker, pdec.m.Worker().URL())
	pdec.record(c.RouteTokens())
	dctx, dcancel := context.WithCancelCause(ctx)
	defer dcancel(nil)
	pctx, pcancel := context.WithTimeout(ctx, c.Served.pd.timeout)
	defer pcancel()
	perr := make(chan *openai.Error, 1)
	// ended is set when the decode leg's end ends the prefill leg: a prefill cut off then did
	// not fail (its KV was no longer needed), so it is no failure (nil on perr, no onFail).
	var ended atomic.Bool
	go func() {
		_, other, aerr := pl.callPrefill(pctx, c, pdec, p)
		if other != nil {
			aerr = statusError(other)
		}
		if aerr != nil && ended.Load() {
			aerr = nil
		}
		if aerr != nil {
			if onFail != nil {
				onFail()
			}
			aerr = prefillStageFailed(pdec.m, aerr)
			dcancel(&legError{e: aerr})
		}
		perr <- aerr
	}()
	// The decode leg's end ends the prefill leg (which has answered by then unless it failed or
	// the client left), and the prefill goroutine is joined before the request returns. A
	// decode leg that failed before answering may have failed because the prefill worker did
	// (a decode engine whose KV fetch was refused): the prefill leg's verdict, if it comes
	// within prefillVerdictGrace, is the client's error, since it names the cause.
	started, err, pe := pl.decodeLeg(dctx, w, ddec, d, ep, func(failed bool) *openai.Error {
		if failed && onFail != nil {
			onFail()
		}
		if failed {
			t := time.NewTimer(prefillVerdictGrace)
			defer t.Stop()
			select {
			case e := <-perr:
				perr <- e // for the join below
				if e != nil {
					return e
				}
			case <-t.C:
			}
		}
		ended.Store(true)
		pcancel()
		return nil
	})
	prefillErr := <-perr
	pl.done(c, pdec)
	if err != nil && !started && ctx.Err() == nil {
		switch {
		case prefillErr != nil && prefillErr.Status >= 500:
			return &pairFailure{err: prefillErr}
		case prefillErr == nil && pe == nil && transferFailed(err):
			return &pairFailure{err: err, transfer: true}
		}
	}
	pl.countPD(w, c, pdPair)
	pl.done(d, ddec)
	pl.decodeFailed(ctx, w, ep, ddec, started, err, pe)
	return nil
}

// pairFailure is how a concurrent pair failed without answering the client (pairConcurrent).
type pairFailure struct {
	err *openai.Error
	// transfer: the decode leg failed the transfer while the prefill leg did not fail;
	// otherwise the prefill leg failed.
	transfer bool
}

// prefillVerdictGrace is how long a pair whose decode leg failed before answering waits for
// its prefill leg's outcome before ending it (the decode failure is then the client's error).
const prefillVerdictGrace = time.Second

// statusError is the failure of a leg answered with a non-2xx status: a 4xx keeps its status
// (the engine's verdict), anything else is a 502.
func statusError(a *prefillAnswer) *openai.Error {
	status := http.StatusBadGateway
	if a.status >= 400 && a.status < 500 {
		status = a.status
	}
	return &openai.Error{Status: status, Type: openai.TypeUpstream, Code: "upstream_error",
		Message: fmt.Sprintf("answered %d: %s", a.status, strings.TrimSpace(string(a.body[:min(len(a.body), 512)])))}
}

// servePair runs c as a prefill/decode pair when it pays, with ddec its decode worker (held).
// It reports whether it answered the client; when false, the caller runs the request whole on
// ddec (the reason is in the X-Kvgate-Pd header).
func (pl *Pipeline) servePair(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, s *routeScratch, ddec *Decision) bool {
	pd := &c.Served.pd
	tokens := c.RouteTokens()
	reason := splitReason(len(tokens), ddec.matched*ddec.bs, pd.minUncached)
	// An SGLang decode-mode server serves nothing without a bootstrap room: with one, every
	// request is a pair (only a both worker may run one whole).
	mustPair := pd.transferOf(ddec.m) == PDTransferSGLang && ddec.m.Worker().Role() == worker.RoleDecode
	if mustPair {
		reason = pdPair
	}
	var pdec Decision
	if reason == pdPair {
		ddec.keys = slices.Clone(ddec.keys) // routing the prefill leg reuses the scratch they alias
		if pl.route(s, &pdec, c, ddec.m, legPrefill) != nil {
			pl.done(c, &pdec)
			reason = pdNoPrefill
		}
	}
	if reason == pdPair {
		if tr := pd.transferOf(pdec.m); !pdSupported(pdec.m, tr) || !pdSupported(ddec.m, tr) {
			pl.done(c, &pdec)
			pl.done(c, ddec)
			pl.countPD(w, c, pdNotSupported)
			rt, m := pdec.m.Engine().Runtime(), pdec.m
			if !pdSupported(ddec.m, tr) {
				rt, m = ddec.m.Engine().Runtime(), ddec.m
			}
			aerr := *engine.ErrPDNotSupported(rt)
			aerr.Message = "worker " + m.Worker().URL() + ": " + aerr.Message
			ep.writeError(w, &aerr)
			return true
		}
	}
	if reason == pdPair && pd.transferOf(pdec.m) != PDTransferSGLang && multipleOutputs(c) {
		pl.done(c, &pdec)
		reason = pdMultiple
	}
	if reason != pdPair && mustPair {
		pl.countPD(w, c, reason)
		pl.done(c, ddec)
		ep.writeError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "no_prefill_worker",
			Message: "prefill stage: no healthy prefill worker for the model's SGLang decode workers"})
		return true
	}
	if reason != pdPair {
		pl.countPD(w, c, reason)
		return false
	}
	hdr := c.Req.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	if hdr.Get("X-Request-Id") == "" {
		hdr.Set("X-Request-Id", pl.newRequestID())
	}
	tr := pd.transferOf(pdec.m)
	for attempt := 0; ; attempt++ {
		answered, failed := true, (*pairFailure)(nil)
		switch tr {
		case PDTransferSGLang:
			failed = pl.pairSGLang(ctx, w, c, ep, ddec, &pdec, hdr)
		case PDTransferMooncake:
			answered, failed = pl.pairMooncake(ctx, w, c, ep, ddec, &pdec, hdr)
		default:
			return pl.pairNIXL(ctx, w, c, ep, s, ddec, &pdec, hdr)
		}
		if failed == nil {
			return answered
		}
		if !failed.transfer && attempt == 0 && pl.reroutePrefill(s, &pdec, c, ddec, tr) {
			// The decode engine may still hold the ended leg under its id: the new pair's
			// legs share one of their own, the old one marked, so logs still join them.
			hdr = hdr.Clone()
			hdr.Set("X-Request-Id", hdr.Get("X-Request-Id")+"-retry")
			continue
		}
		return pl.concurrentFailed(ctx, w, c, ep, ddec, failed, mustPair)
	}
}

// reroutePrefill picks another prefill worker for a pair whose prefill leg failed on pdec's
// (released) worker: one that carries transfer style tr, not the decode worker. It reports
// false, with nothing held, when there is none.
func (pl *Pipeline) reroutePrefill(s *routeScratch, pdec *Decision, c *Call, ddec *Decision, tr string) bool {
	failed := pdec.m
	s.also = ddec.m
	if pl.route(s, pdec, c, failed, legPrefill) != nil {
		return false
	}
	if c.Served.pd.transferOf(pdec.m) == tr && pdSupported(pdec.m, tr) {
		pl.met.pdRetried.Inc()
		return true
	}
	pl.done(c, pdec)
	return false
}

// concurrentFailed ends a concurrent pair that failed on every try without answering the
// client (f: the last failure): the request runs whole on the decode worker (servePair's
// false), counted as prefill_failed or, when the decode leg failed the transfer, as
// transfer_failed (the engine then prefills it itself, as after a failed NIXL transfer); a
// worker that serves only pairs (an SGLang decode-mode server: mustPair) gives the client the
// failure instead.
func (pl *Pipeline) concurrentFailed(ctx context.Context, w http.ResponseWriter, c *Call, ep *Endpoint, ddec *Decision, f *pairFailure, mustPair bool) bool {
	switch {
	case mustPair:
		pl.countPD(w, c, pdPair)
		pl.done(c, ddec)
		if f.transfer {
			pl.decodeFailed(ctx, w, ep, ddec, false, f.err, nil)
		} else {
			ep.writeError(w, f.err)
		}
		return true
	case f.transfer:
		pl.met.upstream.WithLabelValues(ddec.m.Worker().URL(), "before_first_byte").Inc()
		pl.countPD(w, c, pdTransferFailed)
	default:
		w.Header().Del(HeaderPrefillWorker)
		pl.countPD(w, c, pdPrefillFailed)
	}
	return false
}

// countPD counts a disaggregated pool's request by outcome and names it in the response.
func (pl *Pipeline) countPD(w http.ResponseWriter, c *Call, outcome string) {
	pl.met.pd.WithLabelValues(outcome).Inc()
	w.Header().Set(HeaderPD, outcome)
	if c.rec != nil {
		c.rec.PD = outcome
	}
}

// newRequestID returns a fresh X-Request-Id for a pair's legs (both carry the same one:
// wire/pd.md §2.5).
func (pl *Pipeline) newRequestID() string {
	return strconv.FormatUint(pl.rand(), 16) + strconv.FormatUint(pl.rand(), 16)
}

// maxPrefillAnswer bounds the prefill answer read whole (one token and kv_transfer_params).
const maxPrefillAnswer = 4 << 20

// prefillAnswer is a prefill leg's answer that is not a handoff: an HTTP status the client
// gets as it is (4xx: the engine's verdict on the request).
type prefillAnswer struct {
	status int
	header http.Header
	body   []byte
}

// callPrefill sends the prefill leg p to pdec's worker and reads its answer whole. It returns
// the answer's NIXL hand-off on a 2xx (the body's kv_transfer_params from an HTTP worker, the
// GenerateComplete's field 12 from a gRPC one; nil when it has none), the answer to relay on
// another status, or the failure. c is the pair's call, for the leg's span.
func (pl *Pipeline) callPrefill(ctx context.Context, c *Call, pdec *Decision, p *engine.Request) (kv json.RawMessage, other *prefillAnswer, aerr *openai.Error) {
	ctx, span := pl.prefillSpan(ctx, c, pdec)
	defer func() { endSpan(span, aerr) }()
	resp, err := pdec.m.Engine().Generate(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, CtxError(ctx)
		}
		return nil, nil, engine.Classify(err)
	}
	defer resp.Body.Close()
	var body []byte
	for {
		piece, err := resp.Body.Next()
		body = append(body, piece...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, CtxError(ctx)
			}
			return nil, nil, engine.Classify(err)
		}
		if len(body) > maxPrefillAnswer {
			return nil, nil, &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeUpstream, Code: "prefill_answer_too_large",
				Message: fmt.Sprintf("the prefill worker's answer is larger than %d bytes", maxPrefillAnswer)}
		}
	}
	pdec.pick.Prefilled()
	pdec.m.Worker().MarkServed(time.Now())
	if resp.Status/100 != 2 {
		return nil, &prefillAnswer{status: resp.Status, header: resp.Header, body: body}, nil
	}
	if resp.KVTransferParams != nil {
		return resp.KVTransferParams(), nil, nil
	}
	return kvParams(body), nil, nil
}

// prefillStageFailed is the client's answer for a concurrent pair whose prefill leg failed,
// unless the pair is run again or whole (servePair): the prefill stage is unavailable,
// a 503 the client may retry whatever the prefill worker answered (a 5xx, a transport error,
// the PD timeout), named in the message. A 4xx is the engine's verdict on the request and
// keeps its status.
func prefillStageFailed(m *fleet.Member, e *openai.Error) *openai.Error {
	out := *e
	if out.Status >= 500 {
		out.Status, out.Type, out.Code = http.StatusServiceUnavailable, openai.TypeUnavailable, "prefill_failed"
	}
	out.Message = "prefill stage: prefill worker " + m.Worker().URL() + " failed: " + e.Message
	return &out
}

// bootstrapHost returns a prefill worker's host as SGLang's bootstrap_host (IPv6 in brackets).
func bootstrapHost(w *worker.Worker) string {
	u, err := url.Parse(w.URL())
	if err != nil {
		return ""
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil && ip.To4() == nil {
		return "[" + h + "]"
	}
	return h
}

// rawJSON encodes v for an openai.Edit (v's types always encode).
func rawJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// done releases a leg's load and offers the freed slot to the pool's admission queue.
func (pl *Pipeline) done(c *Call, d *Decision) {
	d.pick.Done()
	if d.m != nil {
		pl.handOff(c.Served, d.m)
	}
}

// transferFields are the request fields that direct a KV transfer: the gateway sets them on
// a pair's legs, and a client's own are stripped (a client must not direct transfers).
var transferFields = []string{"kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room", "bootstrap_pair_key",
	"routed_dp_rank", "disagg_prefill_dp_rank"}

// stripTransferFields removes a client's transfer fields from the bodies its request's legs
// get, and counts the request.
func (pl *Pipeline) stripTransferFields(c *Call) {
	for _, k := range transferFields {
		if c.bodyHas(k) {
			c.Req.Edits = append(c.Req.Edits, openai.Edit{Key: k})
		}
	}
	if len(c.Req.Edits) > 0 {
		pl.met.pdStripped.Inc()
	}
}

// pdSupported reports whether m can carry a leg of a pair of transfer style tr: any HTTP
// worker (the legs are body fields), a grpc:// worker whose runtime carries it
// (engine.PDRuntimeSupports), or one whose runtime is not detected yet (its engine refuses
// the leg if it turns out unable: ErrPDNotSupported).
func pdSupported(m *fleet.Member, tr string) bool {
	if m.Worker().Kind() != worker.KindGRPC {
		return true
	}
	rt := m.Engine().Runtime()
	return rt == "" || engine.PDRuntimeSupports(rt, tr == PDTransferNIXL || tr == PDTransferMooncake)
}

// multipleOutputs reports whether c asks for several outputs (n > 1, or several prompts): a
// NIXL prefill answer carries one kv_transfer_params, so SMG sends such requests to the
// decode worker alone (wire/pd.md §2.1), and so does kvgate; a Mooncake pair's one
// transfer_id names one prompt's KV, so those run whole too.
func multipleOutputs(c *Call) bool {
	switch {
	case c.Req.Completion != nil:
		return c.Req.Completion.N > 1 || len(c.Req.Completion.Prompts) > 1
	case c.Req.Chat != nil:
		return c.Req.Chat.N > 1
	}
	return false
}
