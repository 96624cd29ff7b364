package conversation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kvgate/kvgate/pkg/openai"
)

// The calls on stored state: GET and DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items and the Conversations API. Each returns the JSON body to
// send or an OpenAI-shaped error (404 for what the client's key cannot see).

// ListQuery is a list call's paging: items after the one with id After, at most Limit of them
// (1-100, default 20), in Order "asc" or "desc" (the default, newest first).
type ListQuery struct {
	After string
	Limit int
	Order string
}

// ParseListQuery validates a list call's after, limit and order parameters.
func ParseListQuery(after, limit, order string) (ListQuery, *openai.Error) {
	q := ListQuery{After: after, Limit: 20, Order: "desc"}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > 100 {
			return q, openai.BadRequest("limit", "limit must be an integer from 1 to 100")
		}
		q.Limit = n
	}
	switch order {
	case "":
	case "asc", "desc":
		q.Order = order
	default:
		return q, openai.BadRequest("order", `order must be "asc" or "desc"`)
	}
	return q, nil
}

// itemIDOf returns the id of an item in canonical form (which starts {"id":"...").
func itemIDOf(raw []byte) string {
	const head = `{"id":`
	if !bytes.HasPrefix(raw, []byte(head)) {
		return ""
	}
	rest := raw[len(head):]
	end := bytes.IndexByte(rest[min(1, len(rest)):], '"')
	if end < 0 {
		return ""
	}
	var id string
	if json.Unmarshal(rest[:end+2], &id) != nil {
		return ""
	}
	return id
}

// listItems pages raws (oldest first) by q into a list object.
func listItems(raws [][]byte, q ListQuery) ([]byte, *openai.Error) {
	order := make([][]byte, len(raws))
	for i, r := range raws {
		if q.Order == "desc" {
			order[len(raws)-1-i] = r
		} else {
			order[i] = r
		}
	}
	if q.After != "" {
		found := false
		for i, r := range order {
			if itemIDOf(r) == q.After {
				order, found = order[i+1:], true
				break
			}
		}
		if !found {
			return nil, notFound("after", fmt.Sprintf("Item with id '%s' not found.", q.After))
		}
	}
	more := len(order) > q.Limit
	if more {
		order = order[:q.Limit]
	}
	data := []byte{'['}
	for i, r := range order {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, r...)
	}
	data = append(data, ']')
	first, last := "", ""
	if len(order) > 0 {
		first, last = itemIDOf(order[0]), itemIDOf(order[len(order)-1])
	}
	return openai.AppendList(nil, data, first, last, more), nil
}

// splitItems returns the elements of a stored items array.
func splitItems(raw []byte) ([][]byte, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	out := make([][]byte, len(elems))
	for i, e := range elems {
		out[i] = e
	}
	return out, nil
}

// record returns the stored record of id, or a 404.
func (s *Service) record(ctx context.Context, scope, id string) (*Record, *openai.Error) {
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	recs, err := s.store.GetResponses(ctx, scope, []string{id})
	if err != nil {
		return nil, s.storeError("read", err)
	}
	if recs[0] == nil {
		return nil, notFound("response_id", fmt.Sprintf("Response with id '%s' not found.", id))
	}
	return recs[0], nil
}

// Response answers GET /v1/responses/{id}: the stored response object.
func (s *Service) Response(ctx context.Context, scope, id string) ([]byte, *openai.Error) {
	r, aerr := s.record(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	return r.Response, nil
}

// DeleteResponse answers DELETE /v1/responses/{id}. Later follow-ups of a chain through it
// answer 404.
func (s *Service) DeleteResponse(ctx context.Context, scope, id string) ([]byte, *openai.Error) {
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	ok, err := s.store.DeleteResponse(ctx, scope, id)
	if err != nil {
		return nil, s.storeError("write", err)
	}
	if !ok {
		return nil, notFound("response_id", fmt.Sprintf("Response with id '%s' not found.", id))
	}
	return deleted(id, openai.ObjectResponse), nil
}

func deleted(id, object string) []byte {
	b := append([]byte(`{"id":`), openai.AppendString(nil, id)...)
	b = append(b, `,"object":`...)
	b = openai.AppendString(b, object)
	return append(b, `,"deleted":true}`...)
}

// InputItems answers GET /v1/responses/{id}/input_items: the response's own input items.
func (s *Service) InputItems(ctx context.Context, scope, id string, q ListQuery) ([]byte, *openai.Error) {
	r, aerr := s.record(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	raws, err := splitItems(r.Input)
	if err != nil {
		return nil, &openai.Error{Status: http.StatusInternalServerError, Type: openai.TypeServer, Message: "a stored response could not be read"}
	}
	return listItems(raws, q)
}

// appendConversation writes the conversation object.
func appendConversation(dst []byte, c *Conversation) []byte {
	dst = append(dst, `{"id":`...)
	dst = openai.AppendString(dst, c.ID)
	dst = append(dst, `,"object":"conversation","created_at":`...)
	dst = strconv.AppendInt(dst, c.CreatedAt, 10)
	dst = append(dst, `,"metadata":`...)
	if len(c.Metadata) == 0 {
		dst = append(dst, "{}"...)
	} else {
		dst = append(dst, c.Metadata...)
	}
	return append(dst, '}')
}

// conversationBody is a POST /v1/conversations (or its items, or its update) body.
type conversationBody struct {
	Items    json.RawMessage `json:"items"`
	Metadata json.RawMessage `json:"metadata"`
}

// maxCreateItems is how many items POST /v1/conversations may carry, as the OpenAI reference
// sets it.
const maxCreateItems = 20

func parseConversationBody(body []byte, maxItems int, requireItems bool) (*conversationBody, []openai.Item, *openai.Error) {
	var b conversationBody
	if firstByteIs(body, '{') != nil || json.Unmarshal(body, &b) != nil {
		return nil, nil, openai.BadRequest("", "the body must be a JSON object")
	}
	if len(b.Metadata) > 0 && string(b.Metadata) != "null" {
		if err := openai.CheckMetadata(b.Metadata); err != nil {
			return nil, nil, err
		}
	} else {
		b.Metadata = nil
	}
	if len(b.Items) == 0 || string(b.Items) == "null" {
		if requireItems {
			return nil, nil, openai.BadRequest("items", "items is required")
		}
		return &b, nil, nil
	}
	items, aerr := openai.ParseItems(b.Items, "items", maxItems)
	if aerr != nil {
		return nil, nil, aerr
	}
	for i := range items {
		if items[i].Type == openai.ItemReference {
			return nil, nil, openai.BadRequest(fmt.Sprintf("items[%d].type", i), "item_reference items cannot be added to a conversation")
		}
	}
	return &b, items, nil
}

func firstByteIs(b []byte, c byte) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != c {
		return fmt.Errorf("want %q", c)
	}
	return nil
}

// canonical gives items without an id one of a fresh batch and returns them encoded.
func canonical(items []openai.Item) [][]byte {
	base := newHex()
	out := make([][]byte, len(items))
	for i := range items {
		if items[i].ID == "" {
			items[i].ID = itemID(items[i].Type, base, i)
		}
		out[i] = openai.AppendItem(nil, &items[i])
	}
	return out
}

// CreateConversation answers POST /v1/conversations.
func (s *Service) CreateConversation(ctx context.Context, scope string, body []byte) ([]byte, *openai.Error) {
	b, items, aerr := parseConversationBody(body, maxCreateItems, false)
	if aerr != nil {
		return nil, aerr
	}
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	c := &Conversation{ID: NewConversationID(), CreatedAt: s.now().Unix(), Metadata: b.Metadata}
	if err := s.store.PutConversation(ctx, scope, c); err != nil {
		return nil, s.storeError("write", err)
	}
	if len(items) > 0 {
		if _, err := s.store.AppendItems(ctx, scope, c.ID, canonical(items)); err != nil {
			return nil, s.storeError("write", err)
		}
	}
	return appendConversation(nil, c), nil
}

// conversation returns a stored conversation or a 404.
func (s *Service) conversation(ctx context.Context, scope, id string) (*Conversation, *openai.Error) {
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	c, err := s.store.GetConversation(ctx, scope, id)
	if err != nil {
		return nil, s.storeError("read", err)
	}
	if c == nil {
		return nil, notFound("conversation_id", fmt.Sprintf("Conversation with id '%s' not found.", id))
	}
	return c, nil
}

// GetConversation answers GET /v1/conversations/{id}.
func (s *Service) GetConversation(ctx context.Context, scope, id string) ([]byte, *openai.Error) {
	c, aerr := s.conversation(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	return appendConversation(nil, c), nil
}

// UpdateConversation answers POST /v1/conversations/{id}: its metadata replaced.
func (s *Service) UpdateConversation(ctx context.Context, scope, id string, body []byte) ([]byte, *openai.Error) {
	b, _, aerr := parseConversationBody(body, 0, false)
	if aerr != nil {
		return nil, aerr
	}
	c, aerr := s.conversation(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	c.Metadata = b.Metadata
	if err := s.store.PutConversation(ctx, scope, c); err != nil {
		return nil, s.storeError("write", err)
	}
	return appendConversation(nil, c), nil
}

// DeleteConversation answers DELETE /v1/conversations/{id}.
func (s *Service) DeleteConversation(ctx context.Context, scope, id string) ([]byte, *openai.Error) {
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	ok, err := s.store.DeleteConversation(ctx, scope, id)
	if err != nil {
		return nil, s.storeError("write", err)
	}
	if !ok {
		return nil, notFound("conversation_id", fmt.Sprintf("Conversation with id '%s' not found.", id))
	}
	return deleted(id, openai.ObjectConversationDeleted), nil
}

// conversationItems returns a conversation's items or a 404.
func (s *Service) conversationItems(ctx context.Context, scope, id string) ([][]byte, *openai.Error) {
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	raws, ok, err := s.store.ConversationItems(ctx, scope, id)
	if err != nil {
		return nil, s.storeError("read", err)
	}
	if !ok {
		return nil, notFound("conversation_id", fmt.Sprintf("Conversation with id '%s' not found.", id))
	}
	return raws, nil
}

// ListItems answers GET /v1/conversations/{id}/items.
func (s *Service) ListItems(ctx context.Context, scope, id string, q ListQuery) ([]byte, *openai.Error) {
	raws, aerr := s.conversationItems(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	return listItems(raws, q)
}

// AddItems answers POST /v1/conversations/{id}/items: the items added, as a list.
func (s *Service) AddItems(ctx context.Context, scope, id string, body []byte) ([]byte, *openai.Error) {
	_, items, aerr := parseConversationBody(body, s.maxItems, true)
	if aerr != nil {
		return nil, aerr
	}
	if err := s.checkStore(); err != nil {
		return nil, err
	}
	raws := canonical(items)
	ok, err := s.store.AppendItems(ctx, scope, id, raws)
	if err != nil {
		return nil, s.storeError("write", err)
	}
	if !ok {
		return nil, notFound("conversation_id", fmt.Sprintf("Conversation with id '%s' not found.", id))
	}
	return listItems(raws, ListQuery{Limit: len(raws) + 1, Order: "asc"})
}

// GetItem answers GET /v1/conversations/{id}/items/{item_id}.
func (s *Service) GetItem(ctx context.Context, scope, id, itemID string) ([]byte, *openai.Error) {
	raws, aerr := s.conversationItems(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	for _, r := range raws {
		if itemIDOf(r) == itemID {
			return r, nil
		}
	}
	return nil, notFound("item_id", fmt.Sprintf("Item with id '%s' not found.", itemID))
}

// DeleteItem answers DELETE /v1/conversations/{id}/items/{item_id}: the conversation.
func (s *Service) DeleteItem(ctx context.Context, scope, id, itemID string) ([]byte, *openai.Error) {
	c, aerr := s.conversation(ctx, scope, id)
	if aerr != nil {
		return nil, aerr
	}
	ok, err := s.store.DeleteItem(ctx, scope, id, itemID)
	if err != nil {
		return nil, s.storeError("write", err)
	}
	if !ok {
		return nil, notFound("item_id", fmt.Sprintf("Item with id '%s' not found.", itemID))
	}
	return appendConversation(nil, c), nil
}
