package conversation

import (
	"context"
	"errors"
)

// Store keeps the Responses API's state: response records and conversations, each in the
// scope of the client key that created it (Scope), so that another key finds nothing. Reads
// renew what they read (a chain or a conversation in use does not expire); what nobody has
// read or written for the store's TTL is gone, and a store bounded in size drops the least
// recently used first. Missing records are (nil, nil); any error means the store could not
// answer (ErrUnavailable wraps those of a remote store). Implementations are safe for
// concurrent use: Memory for one replica, Redis for several.
type Store interface {
	// GetResponses returns the records of ids in order, nil where one is missing.
	GetResponses(ctx context.Context, scope string, ids []string) ([]*Record, error)
	// GetChain returns the chain that ends with the response id, in one read: the records of
	// its ancestors oldest first (nil where one is missing), then its own; nil when id itself
	// is missing. The records may leave out Response (a follow-up needs only the items).
	GetChain(ctx context.Context, scope, id string) ([]*Record, error)
	// PutResponse stores rec (replacing a record of its id).
	PutResponse(ctx context.Context, scope string, rec *Record) error
	// DeleteResponse removes a record and reports whether it was there.
	DeleteResponse(ctx context.Context, scope, id string) (bool, error)

	// GetConversation returns a conversation without its items.
	GetConversation(ctx context.Context, scope, id string) (*Conversation, error)
	// PutConversation creates or updates a conversation's metadata (its items are kept).
	PutConversation(ctx context.Context, scope string, c *Conversation) error
	// ConversationItems returns a conversation's items (canonical JSON each), oldest first;
	// ok is false when the conversation does not exist.
	ConversationItems(ctx context.Context, scope, id string) (items [][]byte, ok bool, err error)
	// AppendItems appends items to a conversation; ok is false when it does not exist.
	AppendItems(ctx context.Context, scope, id string, items [][]byte) (ok bool, err error)
	// DeleteItem removes the item with itemID from a conversation and reports whether it was
	// there.
	DeleteItem(ctx context.Context, scope, id, itemID string) (bool, error)
	// DeleteConversation removes a conversation and its items.
	DeleteConversation(ctx context.Context, scope, id string) (bool, error)
}

// ErrUnavailable is wrapped by the errors of a store that could not be reached.
var ErrUnavailable = errors.New("conversation: store unavailable")

// Record is one stored response: the response object as returned (Response), the input items
// it was given (Input, a JSON array in canonical form, references resolved), its output items
// (Output, the same array the object holds) and its place in a chain: Previous is its
// previous_response_id and Ancestors the whole chain before it, oldest first, ending with
// Previous, so a follow-up loads every turn in one read. A Record is not modified once stored.
type Record struct {
	ID           string
	Previous     string
	Ancestors    []string
	Conversation string
	CreatedAt    int64
	Response     []byte
	Input        []byte
	Output       []byte
}

// size is the bytes a record holds, for the memory store's bound: its fields, and as much
// again for Input and Output, for their parse the Service keeps while the record lives
// (itemMemo).
func (r *Record) size() int {
	n := len(r.ID) + len(r.Previous) + len(r.Conversation) + len(r.Response) + 2*(len(r.Input)+len(r.Output)) + 64
	for _, a := range r.Ancestors {
		n += len(a) + 16
	}
	return n
}

// Conversation is a conversation's metadata (its items are stored beside it).
type Conversation struct {
	ID        string
	CreatedAt int64
	// Metadata is a JSON object ({} when none was given).
	Metadata []byte
}
