package chat

import (
	"sync"

	"github.com/ardanlabs/jinja"
)

// Agents send the same tool definitions with every turn, and decoding their JSON schemas
// into template values is the largest part of building a request's variables (a map per
// object). A Renderer therefore keeps the decoded parameters of the tools it has seen
// (schemaCache) and gives every request with the same schema bytes the same values: shared
// by concurrent renders, so they must never be written. The library writes a value it was
// given in three ways only (ardanlabs/jinja v1.12.0, eval.go): the list methods append, pop
// and insert, the dict methods pop and update, and {% set x.attr = v %} on whatever dict x
// names. Jinja2's sandbox, which transformers renders in, refuses the first two outright and
// allows the third only on namespace() objects, so templates that render in vLLM do neither;
// mayMutateValues checks a template's tokens for them, and values are shared only with
// templates that pass. BenchmarkRenderChat/render+tokenize/cold-tools measures requests
// whose tools were not seen before.

// schemaCache holds the decoded parameters schemas of tools, by their JSON bytes. It is
// bounded: when adding an entry would pass maxSchemaEntries or maxSchemaBytes of JSON, the
// cache starts over empty. Safe for concurrent use; must not be copied.
type schemaCache struct {
	// mu guards the fields below.
	mu    sync.RWMutex
	vals  map[string]schemaEntry
	bytes int
}

// schemaEntry is a decoded schema and whether it holds an integer beyond int64.
type schemaEntry struct {
	v   jinja.Value
	big bool
}

const (
	maxSchemaEntries = 1024
	maxSchemaBytes   = 1 << 20
)

// decode returns the template value of the schema raw, decoding it on a miss, and whether
// it holds an integer beyond int64.
func (c *schemaCache) decode(raw []byte) (jinja.Value, bool, error) {
	c.mu.RLock()
	e, ok := c.vals[string(raw)]
	c.mu.RUnlock()
	if ok {
		return e.v, e.big, nil
	}
	v, big, err := decodeJSONBig(raw)
	if err != nil || len(raw) > maxSchemaBytes/16 {
		return v, big, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.vals) >= maxSchemaEntries || c.bytes+len(raw) > maxSchemaBytes {
		c.vals, c.bytes = nil, 0
	}
	if c.vals == nil {
		c.vals = map[string]schemaEntry{}
	}
	if _, ok := c.vals[string(raw)]; !ok {
		c.vals[string(raw)] = schemaEntry{v, big}
		c.bytes += len(raw)
	}
	return v, big, nil
}
