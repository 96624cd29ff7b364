package conversation

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// Ids. A response id is "resp_" and 32 random hex digits; the items the gateway names in a
// response (its input items that came without an id, and its output items) carry that
// response's digits and their position: PREFIX_ + 32 hex + 4 hex, e.g. msg_…0003. An
// item_reference can so be resolved from its id alone, with one store read, on any replica.
// Conversations are "conv_" and 32 random hex digits; items added to a conversation directly
// take a fresh random batch in place of a response's digits.

const idHexLen = 32

// newHex returns 32 random hex digits (crypto/rand: ids are the only thing that keeps one
// anonymous client's responses from another on a gateway without client keys).
func newHex() string {
	var b [idHexLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewResponseID returns a fresh response id.
func NewResponseID() string { return "resp_" + newHex() }

// NewConversationID returns a fresh conversation id.
func NewConversationID() string { return "conv_" + newHex() }

// itemPrefix is the id prefix of an item of type typ.
func itemPrefix(typ string) string {
	switch typ {
	case "function_call":
		return "fc_"
	case "function_call_output":
		return "fco_"
	case "reasoning":
		return "rs_"
	}
	return "msg_"
}

// itemID names the item at position idx of the response (or item batch) whose id ends in
// the 32 hex digits base.
func itemID(typ, base string, idx int) string {
	b := make([]byte, 0, 5+idHexLen+4)
	b = append(b, itemPrefix(typ)...)
	b = append(b, base...)
	s := strconv.FormatUint(uint64(idx)&0xffff, 16)
	for range 4 - len(s) {
		b = append(b, '0')
	}
	return string(append(b, s...))
}

// idBase returns the 32 hex digits of a response or conversation id.
func idBase(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == '_' {
			return id[i+1:]
		}
	}
	return id
}

// responseOfItem returns the id of the response an item id names, or "" when the id is not of
// the gateway's form.
func responseOfItem(id string) string {
	base := idBase(id)
	if len(base) != idHexLen+4 || len(base) == len(id) {
		return ""
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return "resp_" + base[:idHexLen]
}
