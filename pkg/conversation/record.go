package conversation

import (
	"encoding/binary"
	"errors"
)

// The encoding of a Record in a remote store: a version byte (1), then each field as a
// uvarint length and its bytes, in the order ID, Previous, Conversation, Response, Input,
// Output, then the created-at time as a varint and the ancestors as a uvarint count and
// length-prefixed ids. It is read without copying the large fields more than once.

const recordVersion = 1

var errBadRecord = errors.New("conversation: malformed stored record")

func encodeRecord(r *Record) []byte {
	n := 1 + 8 + 8 + len(r.Ancestors)*48
	for _, f := range [][]byte{[]byte(r.ID), []byte(r.Previous), []byte(r.Conversation), r.Response, r.Input, r.Output} {
		n += len(f) + binary.MaxVarintLen32
	}
	b := make([]byte, 0, n)
	b = append(b, recordVersion)
	for _, s := range []string{r.ID, r.Previous, r.Conversation} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, f := range [][]byte{r.Response, r.Input, r.Output} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.AppendVarint(b, r.CreatedAt)
	b = binary.AppendUvarint(b, uint64(len(r.Ancestors)))
	for _, a := range r.Ancestors {
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	return b
}

// decodeRecord decodes b; the record's byte fields refer into b.
func decodeRecord(b []byte) (*Record, error) {
	if len(b) == 0 || b[0] != recordVersion {
		return nil, errBadRecord
	}
	b = b[1:]
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	var fs [6][]byte
	for i := range fs {
		f, ok := field()
		if !ok {
			return nil, errBadRecord
		}
		fs[i] = f
	}
	r := &Record{ID: string(fs[0]), Previous: string(fs[1]), Conversation: string(fs[2]), Response: fs[3], Input: fs[4], Output: fs[5]}
	t, k := binary.Varint(b)
	if k <= 0 {
		return nil, errBadRecord
	}
	r.CreatedAt, b = t, b[k:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBadRecord
	}
	b = b[k:]
	if n > 0 {
		r.Ancestors = make([]string, 0, n)
	}
	for range n {
		a, ok := field()
		if !ok {
			return nil, errBadRecord
		}
		r.Ancestors = append(r.Ancestors, string(a))
	}
	if len(b) != 0 {
		return nil, errBadRecord
	}
	return r, nil
}
