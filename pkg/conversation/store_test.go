package conversation

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvgate/kvgate/internal/testutil"
)

// stores returns each Store implementation, fresh, for the conformance tests: Memory and a
// Redis on a redis-server the test starts.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	m, err := NewMemory(MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rs := testutil.StartRedis(t, 0)
	r, err := NewRedis(RedisConfig{URL: rs.URL, Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return map[string]Store{"memory": m, "redis": r}
}

func TestStoreConformance(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			a := &Record{ID: "resp_a", Response: []byte(`{"id":"resp_a"}`), Input: []byte(`[]`), Output: []byte(`[]`), CreatedAt: 7}
			b := &Record{ID: "resp_b", Previous: "resp_a", Ancestors: []string{"resp_a"}, Conversation: "conv_x", Response: []byte(`{"id":"resp_b"}`), Input: []byte(`[{"id":"m"}]`), Output: []byte(`[]`)}
			for _, r := range []*Record{a, b} {
				if err := st.PutResponse(ctx, "k1", r); err != nil {
					t.Fatal(err)
				}
			}
			got, err := st.GetResponses(ctx, "k1", []string{"resp_b", "resp_missing", "resp_a"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]*Record{b, nil, a}, got); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			other, _ := st.GetResponses(ctx, "k2", []string{"resp_a"})
			if other[0] != nil {
				t.Errorf("another scope read resp_a: got %+v, want nothing", other[0])
			}
			if ok, _ := st.DeleteResponse(ctx, "k2", "resp_a"); ok {
				t.Error("another scope deleted resp_a")
			}
			if ok, err := st.DeleteResponse(ctx, "k1", "resp_a"); !ok || err != nil {
				t.Errorf("delete resp_a: got %v %v, want true", ok, err)
			}
			if got, _ := st.GetResponses(ctx, "k1", []string{"resp_a"}); got[0] != nil {
				t.Error("resp_a still there after delete")
			}
			checkConversations(t, st)
		})
	}
}

func checkConversations(t *testing.T, st Store) {
	ctx := context.Background()
	if ok, _ := st.AppendItems(ctx, "k1", "conv_none", [][]byte{[]byte(`{"id":"x"}`)}); ok {
		t.Error("appended to a conversation that does not exist")
	}
	c := &Conversation{ID: "conv_1", CreatedAt: 5, Metadata: []byte(`{"a":"b"}`)}
	if err := st.PutConversation(ctx, "k1", c); err != nil {
		t.Fatal(err)
	}
	items := [][]byte{[]byte(`{"id":"i1","type":"message"}`), []byte(`{"id":"i2","type":"message"}`), []byte(`{"id":"i3","type":"message"}`)}
	if ok, err := st.AppendItems(ctx, "k1", "conv_1", items[:2]); !ok || err != nil {
		t.Fatalf("append: %v %v", ok, err)
	}
	if ok, err := st.AppendItems(ctx, "k1", "conv_1", items[2:]); !ok || err != nil {
		t.Fatalf("append: %v %v", ok, err)
	}
	got, ok, err := st.ConversationItems(ctx, "k1", "conv_1")
	if err != nil || !ok || !cmp.Equal(got, items) {
		t.Errorf("items: got %q %v %v, want %q", got, ok, err, items)
	}
	if _, ok, _ := st.ConversationItems(ctx, "k2", "conv_1"); ok {
		t.Error("another scope sees conv_1")
	}
	if ok, _ := st.DeleteItem(ctx, "k1", "conv_1", "i2"); !ok {
		t.Error("delete item i2 failed")
	}
	got, _, _ = st.ConversationItems(ctx, "k1", "conv_1")
	if !cmp.Equal(got, [][]byte{items[0], items[2]}) {
		t.Errorf("items after delete: got %q", got)
	}
	gc, err := st.GetConversation(ctx, "k1", "conv_1")
	if err != nil || gc == nil || gc.CreatedAt != 5 || string(gc.Metadata) != `{"a":"b"}` {
		t.Errorf("conversation: got %+v %v", gc, err)
	}
	if ok, _ := st.DeleteConversation(ctx, "k1", "conv_1"); !ok {
		t.Error("delete conversation failed")
	}
	if gc, _ := st.GetConversation(ctx, "k1", "conv_1"); gc != nil {
		t.Error("conversation still there after delete")
	}
	if _, ok, _ := st.ConversationItems(ctx, "k1", "conv_1"); ok {
		t.Error("conversation items still there after delete")
	}
}

// TestRedisTTLRenewedByReads: a record's TTL runs from its last read, so a chain in use stays.
func TestRedisTTLRenewedByReads(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	r, err := NewRedis(RedisConfig{URL: rs.URL, TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.PutResponse(ctx, "", &Record{ID: "resp_t", Response: []byte("{}"), Input: []byte("[]"), Output: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration { return r.c.PTTL(ctx, r.respKey("", "resp_t")).Val() }
	if d := ttl(); d <= 0 || d > 1500*time.Millisecond {
		t.Fatalf("ttl after put: %v", d)
	}
	testutil.WaitFor(t, "the ttl to run down", func() bool { return ttl() < time.Second })
	if _, err := r.GetResponses(ctx, "", []string{"resp_t"}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d < 1400*time.Millisecond {
		t.Errorf("ttl after a read: got %v, want renewed to about 1.5s", d)
	}
}

// TestRedisDown: a Redis that is not there is ErrUnavailable, quickly.
func TestRedisDown(t *testing.T) {
	port := testutil.FreePort(t)
	r, err := NewRedis(RedisConfig{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t0 := time.Now()
	_, err = r.GetResponses(context.Background(), "", []string{"resp_x"})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("got %v, want ErrUnavailable", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("took %v to fail", d)
	}
}

func TestRecordEncoding(t *testing.T) {
	r := &Record{ID: "resp_1", Previous: "resp_0", Ancestors: []string{"resp_z", "resp_0"}, Conversation: "conv_q", CreatedAt: -3,
		Response: []byte(`{"x":1}`), Input: []byte(`[1]`), Output: []byte(`[]`)}
	got, err := decodeRecord(encodeRecord(r))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	b := encodeRecord(r)
	for i := range len(b) {
		if _, err := decodeRecord(b[:i]); err == nil {
			t.Fatalf("decoded a record cut at %d of %d bytes", i, len(b))
		}
	}
}
