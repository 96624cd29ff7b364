package conversation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/pkg/openai"
)

// DefaultMaxChain is the longest chain of responses a previous_response_id may continue when
// Config.MaxChain is zero: far beyond real agent sessions, and it bounds the ids each record
// carries (Record.Ancestors) and the reads of one follow-up.
const DefaultMaxChain = 1000

// Config configures a Service.
type Config struct {
	// Store keeps responses and conversations. Required.
	Store Store
	// MaxChain bounds the responses a follow-up's chain may hold (default DefaultMaxChain);
	// a longer one is a 400.
	MaxChain int
	// MaxItems bounds the items of one request's input and of a conversation it continues
	// (default openai.DefaultMaxMessages); more is a 413.
	MaxItems int
	// Registerer receives the service's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now is the clock of created_at and of the store's outage window (nil: time.Now).
	Now func() time.Time
}

// Service is the gateway's Responses API state over a Store: it expands a request into its
// turn (Begin: the chain or conversation it continues, item references resolved, the chat
// conversation it runs as), keeps the finished turn (Finish) and answers the retrieve, delete,
// list and Conversations calls. Safe for concurrent use.
//
// When the store fails (ErrUnavailable), turns that need it are answered 503 at once for the
// next second instead of each waiting on the store; store: false turns that continue nothing
// keep working, and the first call after the second tries the store again.
type Service struct {
	store    Store
	maxChain int
	maxItems int
	now      func() time.Time
	met      *serviceMetrics
	memo     *itemMemo
	// downUntil is when the store may be tried again after a failure (unix nanoseconds).
	downUntil atomic.Int64
}

// New validates cfg and returns the service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("conversation: a store is required")
	}
	if cfg.MaxChain < 0 || cfg.MaxItems < 0 {
		return nil, errors.New("conversation: max chain and max items must not be negative")
	}
	if cfg.MaxChain == 0 {
		cfg.MaxChain = DefaultMaxChain
	}
	if cfg.MaxItems == 0 {
		cfg.MaxItems = openai.DefaultMaxMessages
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	met, err := newServiceMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{store: cfg.Store, maxChain: cfg.MaxChain, maxItems: cfg.MaxItems, now: cfg.Now, met: met, memo: newItemMemo()}, nil
}

// Outage window after a store failure.
const outage = time.Second

// storeError turns a store failure into the client's answer: 503 for an unreachable store
// (opening the outage window), 413 for an entry the memory store cannot hold.
func (s *Service) storeError(op string, err error) *openai.Error {
	if errors.Is(err, ErrTooLarge) {
		return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "store_too_large",
			Message: "the response is too large for the gateway's responses store (--responses-max-bytes); send store: false to skip storing it"}
	}
	s.met.storeErrors.WithLabelValues(op).Inc()
	s.downUntil.Store(s.now().Add(outage).UnixNano())
	return unavailableError(err)
}

func unavailableError(err error) *openai.Error {
	msg := "the responses store is unavailable"
	if err != nil {
		msg += " (" + err.Error() + ")"
	}
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "store_unavailable", Cause: err,
		Message: msg + "; retry shortly. Requests with store: false that continue no previous_response_id or conversation do not need the store."}
}

// checkStore fails fast while the outage window is open.
func (s *Service) checkStore() *openai.Error {
	if s.now().UnixNano() < s.downUntil.Load() {
		return unavailableError(nil)
	}
	return nil
}

// Turn is one POST /v1/responses being served: the request, the response it will be (ID,
// CreatedAt, Model, set by the caller once the model is resolved), what it continues
// (Ancestors, History) and its input with ids assigned (Input).
type Turn struct {
	Req       *openai.ResponsesRequest
	Scope     string
	ID        string
	CreatedAt int64
	Model     string
	// Ancestors is the chain the response continues, oldest first, ending with
	// Req.PreviousResponseID.
	Ancestors []string
	// History is the chain's (or conversation's) items, Input the request's, references
	// resolved.
	History []openai.Item
	Input   []openai.Item
	// Chain lists the responses expanded, oldest first (for /debug/route).
	Chain []string

	next int // index of the next item id
	chat *chatConversation
	// confirm waits for the store's answer on the chain (loadChain); confirmed is its result.
	confirm   func() *openai.Error
	confirmed *openai.Error
	// unconfirmed is the chain expanded from copies that Finish confirms, through copies.
	unconfirmed []*Record
	copies      chainCopies
}

// nextID returns the id of the turn's next item of type typ.
func (t *Turn) nextID(typ string) string {
	id := itemID(typ, idBase(t.ID), t.next)
	t.next++
	return id
}

// ChatBody appends the chat completion request the turn runs as, with the first drop
// messages of the conversation after the instructions left out (truncation: auto).
func (t *Turn) ChatBody(dst []byte, drop int) []byte { return t.chat.appendBody(dst, drop) }

// Droppable is how many messages truncation may leave out.
func (t *Turn) Droppable() int { return t.chat.droppable() }

// AppendResponse appends the response object in the state res (nil: in progress).
func (t *Turn) AppendResponse(dst []byte, res *Result) []byte {
	st := openai.ResponseState{ID: t.ID, CreatedAt: t.CreatedAt, Model: t.Model, Status: openai.ResponseInProgress}
	if res != nil {
		st.Status, st.IncompleteReason, st.Error, st.Usage = res.Status, res.IncompleteReason, res.Error, &res.Usage
		st.Output = openai.AppendItems(nil, res.Items)
	}
	return t.Req.AppendResponse(dst, &st)
}

// needsStore reports whether the turn reads or writes the store.
func needsStore(req *openai.ResponsesRequest) bool {
	if req.Store || req.PreviousResponseID != "" || req.Conversation != "" {
		return true
	}
	for i := range req.Input {
		if req.Input[i].Type == openai.ItemReference {
			return true
		}
	}
	return false
}

// Begin expands req, sent by the client of scope, into its turn: the chain of
// previous_response_id (every stored turn's input and output, oldest first) or the items of
// the conversation, then the input, item references resolved. An unknown (expired, deleted,
// other key's) response, conversation or item is a 404; a chain beyond MaxChain a 400; an
// unreachable store a 503.
func (s *Service) Begin(ctx context.Context, scope string, req *openai.ResponsesRequest) (*Turn, *openai.Error) {
	if needsStore(req) {
		if err := s.checkStore(); err != nil {
			return nil, err
		}
	}
	t := &Turn{Req: req, Scope: scope, ID: NewResponseID(), CreatedAt: s.now().Unix()}
	var aerr *openai.Error
	switch {
	case req.PreviousResponseID != "":
		aerr = s.loadChain(ctx, t)
	case req.Conversation != "":
		aerr = s.loadConversation(ctx, t)
	}
	if aerr != nil {
		return nil, aerr
	}
	if aerr = s.resolveInput(ctx, t); aerr != nil {
		return nil, aerr
	}
	if n := len(t.History) + len(t.Input); n > s.maxItems {
		return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large", Param: "input",
			Message: fmt.Sprintf("the conversation would hold %d items, more than the %d allowed", n, s.maxItems)}
	}
	t.chat = newChatConversation(req, t.History, t.Input)
	return t, nil
}

// chainCopies is a store whose replica keeps copies of the records it wrote or read (Redis):
// a follow-up's chain can be expanded from them at once and confirmed while the turn runs.
type chainCopies interface {
	LocalChain(scope, id string) []*Record
	StartRenew(ctx context.Context, scope string, chain []*Record) func() ([]*Record, error)
	RenewChain(ctx context.Context, scope string, chain []*Record) ([]*Record, error)
	PutResponseRenewing(ctx context.Context, scope string, rec *Record, chain []*Record) ([]*Record, error)
}

// loadChain reads the previous response and its ancestors, in one store read. From a store
// that holds them locally (chainCopies) it expands the copies at once and leaves the store's
// answer for later: a streamed turn's to Turn.Confirm (the round trip overlaps rendering and
// tokenizing; the stream's first event must not come before it), another's to Finish, in the
// round trip of its own write (nothing reaches the client before Finish).
func (s *Service) loadChain(ctx context.Context, t *Turn) *openai.Error {
	prev := t.Req.PreviousResponseID
	if cc, ok := s.store.(chainCopies); ok {
		if local := cc.LocalChain(t.Scope, prev); local != nil {
			if !t.Req.Stream {
				t.copies, t.unconfirmed = cc, local
				return s.expandChain(t, prev, local)
			}
			wait := cc.StartRenew(ctx, t.Scope, local)
			t.confirm = func() *openai.Error {
				chain, err := wait()
				return s.chainAnswer("read", prev, chain, err)
			}
			return s.expandChain(t, prev, local)
		}
	}
	chain, err := s.store.GetChain(ctx, t.Scope, prev)
	if err != nil {
		return s.storeError("read", err)
	}
	return s.expandChain(t, prev, chain)
}

// chainAnswer is the answer for a chain confirmed by the store (op is the store call's
// metric label).
func (s *Service) chainAnswer(op, prev string, chain []*Record, err error) *openai.Error {
	if err != nil {
		return s.storeError(op, err)
	}
	return s.checkChain(prev, chain)
}

// checkChain answers for a chain as GetChain returned it: 404 when the previous response or
// one of its ancestors is missing, 400 when it is too long.
func (s *Service) checkChain(prev string, chain []*Record) *openai.Error {
	if len(chain) == 0 {
		return notFound("previous_response_id", fmt.Sprintf("Previous response with id '%s' not found.", prev))
	}
	head := chain[len(chain)-1]
	if len(head.Ancestors)+1 > s.maxChain-1 {
		return openai.BadRequest("previous_response_id", fmt.Sprintf("the chain of previous_response_id already holds %d responses; at most %d are allowed", len(head.Ancestors)+1, s.maxChain))
	}
	for i, r := range chain[:len(chain)-1] {
		if r == nil {
			return notFound("previous_response_id", fmt.Sprintf("response '%s' in the chain of previous_response_id '%s' has expired or was deleted", head.Ancestors[i], prev))
		}
	}
	return nil
}

// expandChain checks the chain and sets the turn's ancestors, history and chain from it.
func (s *Service) expandChain(t *Turn, prev string, chain []*Record) *openai.Error {
	if aerr := s.checkChain(prev, chain); aerr != nil {
		return aerr
	}
	head := chain[len(chain)-1]
	t.Ancestors = append(append(make([]string, 0, len(head.Ancestors)+1), head.Ancestors...), prev)
	for _, r := range chain {
		items, aerr := s.memo.items(r)
		if aerr != nil {
			return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: "a stored response could not be read: " + aerr.Message}
		}
		t.History = append(t.History, items...)
		t.Chain = append(t.Chain, r.ID)
	}
	return nil
}

// Confirm waits for the store's answer on the chain of a streamed turn Begin expanded from a
// replica's copies (Redis): a 404 when a record of it was deleted or expired meanwhile on any
// replica, a 503 when the store failed. Call it after the work that does not need the answer
// (rendering, tokenizing) and before the turn is sent upstream; without a pending answer it
// returns at once (a turn not streamed has its chain confirmed by Finish, in the round trip
// of its write). Finish confirms too, so nothing is stored on an unconfirmed chain.
func (t *Turn) Confirm() *openai.Error {
	if t.confirm != nil {
		t.confirmed, t.confirm = t.confirm(), nil
	}
	return t.confirmed
}

// loadConversation reads the conversation's items.
func (s *Service) loadConversation(ctx context.Context, t *Turn) *openai.Error {
	raws, ok, err := s.store.ConversationItems(ctx, t.Scope, t.Req.Conversation)
	if err != nil {
		return s.storeError("read", err)
	}
	if !ok {
		return notFound("conversation", fmt.Sprintf("Conversation with id '%s' not found.", t.Req.Conversation))
	}
	if t.History, err = parseStored(raws); err != nil {
		return &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: err.Error()}
	}
	t.Chain = []string{t.Req.Conversation}
	return nil
}

func parseStored(raws [][]byte) ([]openai.Item, error) {
	items := make([]openai.Item, 0, len(raws))
	for _, raw := range raws {
		it, aerr := openai.ParseItem(raw, "stored")
		if aerr != nil {
			return nil, errors.New("a stored item could not be read: " + aerr.Message)
		}
		items = append(items, it)
	}
	return items, nil
}

// resolveInput copies the input with item references replaced by the items they name (from
// the history, else from the response their id names) and ids given to items without one.
func (s *Service) resolveInput(ctx context.Context, t *Turn) *openai.Error {
	t.Input = make([]openai.Item, 0, len(t.Req.Input))
	var byID map[string]*openai.Item
	for i := range t.Req.Input {
		it := t.Req.Input[i]
		if it.Type == openai.ItemReference {
			if byID == nil {
				byID = indexItems(t.History)
			}
			ref, aerr := s.resolveRef(ctx, t, byID, it.ID, i)
			if aerr != nil {
				return aerr
			}
			it = *ref
		}
		if it.ID == "" {
			it.ID = itemID(it.Type, idBase(t.ID), t.next)
		}
		t.next++
		t.Input = append(t.Input, it)
	}
	return nil
}

func indexItems(items []openai.Item) map[string]*openai.Item {
	m := make(map[string]*openai.Item, len(items))
	for i := range items {
		if items[i].ID != "" {
			m[items[i].ID] = &items[i]
		}
	}
	return m
}

// resolveRef finds the item an item_reference names.
func (s *Service) resolveRef(ctx context.Context, t *Turn, byID map[string]*openai.Item, id string, i int) (*openai.Item, *openai.Error) {
	if it, ok := byID[id]; ok {
		return it, nil
	}
	missing := notFound(fmt.Sprintf("input[%d].id", i), fmt.Sprintf("Item with id '%s' not found.", id))
	rid := responseOfItem(id)
	if rid == "" {
		return nil, missing
	}
	recs, err := s.store.GetResponses(ctx, t.Scope, []string{rid})
	if err != nil {
		return nil, s.storeError("read", err)
	}
	if recs[0] == nil {
		return nil, missing
	}
	for _, raw := range [][]byte{recs[0].Input, recs[0].Output} {
		items, aerr := openai.ParseItems(raw, "stored", 1<<30)
		if aerr != nil {
			return nil, missing
		}
		for k, v := range indexItems(items) {
			byID[k] = v
		}
	}
	if it, ok := byID[id]; ok {
		return it, nil
	}
	return nil, missing
}

// notFound is the OpenAI-shaped 404.
func notFound(param, msg string) *openai.Error {
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "not_found", Param: param, Message: msg}
}

// Finish keeps the finished turn when the request asked for it (store, the default): its
// record, and its input and output items appended to its conversation. It returns the
// response object to send.
func (s *Service) Finish(ctx context.Context, t *Turn, res *Result) ([]byte, *openai.Error) {
	if aerr := t.Confirm(); aerr != nil {
		return nil, aerr
	}
	resp := t.AppendResponse(nil, res)
	if !t.Req.Store {
		if t.unconfirmed != nil {
			chain, err := t.copies.RenewChain(ctx, t.Scope, t.unconfirmed)
			if aerr := s.chainAnswer("read", t.Req.PreviousResponseID, chain, err); aerr != nil {
				return nil, aerr
			}
		}
		return resp, nil
	}
	rec := &Record{ID: t.ID, Previous: t.Req.PreviousResponseID, Ancestors: t.Ancestors, Conversation: t.Req.Conversation,
		CreatedAt: t.CreatedAt, Response: resp, Input: openai.AppendItems(nil, t.Input), Output: openai.AppendItems(nil, res.Items)}
	if aerr := s.putRecord(ctx, t, rec); aerr != nil {
		return nil, aerr
	}
	if t.Req.Conversation != "" {
		raws := make([][]byte, 0, len(t.Input)+len(res.Items))
		for i := range t.Input {
			raws = append(raws, openai.AppendItem(nil, &t.Input[i]))
		}
		for i := range res.Items {
			raws = append(raws, openai.AppendItem(nil, &res.Items[i]))
		}
		ok, err := s.store.AppendItems(ctx, t.Scope, t.Req.Conversation, raws)
		if err != nil {
			return nil, s.storeError("write", err)
		}
		if !ok {
			return nil, notFound("conversation", fmt.Sprintf("Conversation with id '%s' was deleted during the response.", t.Req.Conversation))
		}
	}
	return resp, nil
}

// putRecord stores the turn's record, in the round trip that confirms its chain when that is
// still to do (a chain cut meanwhile is the 404 and leaves nothing stored).
func (s *Service) putRecord(ctx context.Context, t *Turn, rec *Record) *openai.Error {
	if t.unconfirmed == nil {
		if err := s.store.PutResponse(ctx, t.Scope, rec); err != nil {
			return s.storeError("write", err)
		}
		return nil
	}
	chain, err := t.copies.PutResponseRenewing(ctx, t.Scope, rec, t.unconfirmed)
	return s.chainAnswer("write", t.Req.PreviousResponseID, chain, err)
}
