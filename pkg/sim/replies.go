package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// Replies scripts the simulator's output (simworker --reply-file): generation n of the process
// (one per sample, counted over HTTP and gRPC together) emits exactly the tokens of reply
// n mod len and stops with finish reason "stop", unless max_tokens cuts it first ("length").
// Tests and benchmarks use it to drive any output text (reasoning blocks, tool calls in a
// model's own format) through the real HTTP and gRPC paths. It is safe for concurrent use.
type Replies struct {
	replies [][]uint32
	next    atomic.Uint64
}

// ErrBadReplies is wrapped by LoadReplies for an unusable reply file.
var ErrBadReplies = errors.New("sim: bad reply file")

// LoadReplies reads a reply file: one JSON string per line (blank lines skipped), each
// tokenized with encode the way the engine's output would be (special-token text becomes the
// special token). Every reply must tokenize to at least one token: a generation emits one.
func LoadReplies(path string, encode func(string) ([]uint32, error)) (*Replies, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReplies, err)
	}
	defer f.Close()
	var r Replies
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var text string
		if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: want a JSON string: %w", ErrBadReplies, path, line, err)
		}
		ids, err := encode(text)
		if err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %w", ErrBadReplies, path, line, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("%w: %s line %d: the reply has no tokens", ErrBadReplies, path, line)
		}
		r.replies = append(r.replies, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadReplies, path, err)
	}
	if len(r.replies) == 0 {
		return nil, fmt.Errorf("%w: %s holds no reply", ErrBadReplies, path)
	}
	return &r, nil
}

// Next returns the tokens of the next generation's reply; nil on a nil Replies (no script:
// the engine samples). The slice is shared and must not be modified.
func (r *Replies) Next() []uint32 {
	if r == nil {
		return nil
	}
	n := r.next.Add(1) - 1
	return r.replies[n%uint64(len(r.replies))]
}
