package conversation

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

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
			checkChains(t, st)
			checkConversations(t, st)
		})
	}
}

// checkChains: GetChain reads a chain whole in one call, a missing ancestor as nil, a missing
// head (or another scope's) as nothing.
func checkChains(t *testing.T, st Store) {
	ctx := context.Background()
	var ids []string
	var want []*Record
	for i := range 4 {
		id := fmt.Sprintf("resp_c%d", i)
		r := &Record{ID: id, Ancestors: append([]string(nil), ids...), Response: []byte(`{"id":"` + id + `"}`),
			Input: []byte(fmt.Sprintf(`[{"id":"in%d"}]`, i)), Output: []byte(fmt.Sprintf(`[{"id":"out%d"}]`, i)), CreatedAt: int64(i)}
		if i > 0 {
			r.Previous = ids[i-1]
		}
		if err := st.PutResponse(ctx, "k1", r); err != nil {
			t.Fatal(err)
		}
		ids, want = append(ids, id), append(want, r)
	}
	// Response is left out by a store that keeps it apart.
	noResponse := cmpopts.IgnoreFields(Record{}, "Response")
	got, err := st.GetChain(ctx, "k1", "resp_c3")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, noResponse); diff != "" {
		t.Errorf("chain of resp_c3 (-want +got):\n%s", diff)
	}
	if got, _ := st.GetChain(ctx, "k1", "resp_c0"); len(got) != 1 || got[0].ID != "resp_c0" {
		t.Errorf("chain of resp_c0: got %+v, want [resp_c0]", got)
	}
	if _, err := st.DeleteResponse(ctx, "k1", "resp_c1"); err != nil {
		t.Fatal(err)
	}
	got, _ = st.GetChain(ctx, "k1", "resp_c3")
	if diff := cmp.Diff([]*Record{want[0], nil, want[2], want[3]}, got, noResponse); diff != "" {
		t.Errorf("chain with resp_c1 deleted (-want +got):\n%s", diff)
	}
	for _, c := range [][2]string{{"k1", "resp_none"}, {"k2", "resp_c3"}} {
		if got, err := st.GetChain(ctx, c[0], c[1]); got != nil || err != nil {
			t.Errorf("chain of %s in scope %s: got %+v %v, want nothing", c[1], c[0], got, err)
		}
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
	// A chain read renews every record of the chain.
	if err := r.PutResponse(ctx, "", &Record{ID: "resp_u", Previous: "resp_t", Ancestors: []string{"resp_t"}, Response: []byte("{}"), Input: []byte("[]"), Output: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the ttl to run down", func() bool { return ttl() < time.Second })
	if got, err := r.GetChain(ctx, "", "resp_u"); err != nil || len(got) != 2 {
		t.Fatalf("chain: got %d records, %v", len(got), err)
	}
	if d := ttl(); d < 1400*time.Millisecond {
		t.Errorf("ttl of an ancestor after a chain read: got %v, want renewed to about 1.5s", d)
	}
}

// TestRedisChainMalformed: a value that is not a record, at the head or in the chain, is the
// store failing (ErrUnavailable), not a panic and not a partial chain.
func TestRedisChainMalformed(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	ctx := context.Background()
	good := encodeRecord(&Record{ID: "resp_h", Ancestors: []string{"resp_a"}, Response: []byte("{}")})
	for name, vals := range map[string][2]string{
		"head not a record":     {"", "garbage"},
		"head cut":              {"", string(good[:len(good)-3])},
		"ancestor not a record": {"garbage", string(good)},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := NewRedis(RedisConfig{URL: rs.URL})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			r.c.Del(ctx, r.respKey("", "resp_a"))
			if vals[0] != "" {
				r.c.Set(ctx, r.respKey("", "resp_a"), vals[0], 0)
			}
			r.c.Set(ctx, r.respKey("", "resp_h"), vals[1], 0)
			got, err := r.GetChain(ctx, "", "resp_h")
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("got %+v %v, want ErrUnavailable", got, err)
			}
		})
	}
}

// TestRedisChainReplicas: a replica's chain read sees what another replica did in Redis since
// (a deleted or expired record is missing though this replica holds a copy), and renews the
// records it holds a copy of.
func TestRedisChainReplicas(t *testing.T) {
	rs := testutil.StartRedis(t, 0)
	ctx := context.Background()
	var reps [2]*Redis
	for i := range reps {
		r, err := NewRedis(RedisConfig{URL: rs.URL, TTL: 1500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		reps[i] = r
	}
	a, b := reps[0], reps[1]
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("resp_%d", i)
		if err := a.PutResponse(ctx, "k", &Record{ID: id, Ancestors: append([]string(nil), ids...), Response: []byte("{}"), Input: []byte("[]"), Output: []byte("[]")}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	chainIDs := func(r *Redis, id string) []string {
		t.Helper()
		recs, err := r.GetChain(ctx, "k", id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rec := range recs {
			if rec == nil {
				out = append(out, "-")
			} else {
				out = append(out, rec.ID)
			}
		}
		return out
	}
	for _, r := range reps {
		if diff := cmp.Diff(ids, chainIDs(r, "resp_2")); diff != "" {
			t.Errorf("chain (-want +got):\n%s", diff)
		}
	}
	ttl := func(id string) time.Duration { return a.c.PTTL(ctx, a.respKey("k", id)).Val() }
	testutil.WaitFor(t, "the ttl to run down", func() bool { return ttl("resp_0") < time.Second })
	chainIDs(a, "resp_2") // every record held by a: renewed all the same
	for _, id := range ids {
		if d := ttl(id); d < 1400*time.Millisecond {
			t.Errorf("ttl of %s after a chain read from copies: got %v, want renewed to about 1.5s", id, d)
		}
	}
	if ok, _ := b.DeleteResponse(ctx, "k", "resp_1"); !ok {
		t.Fatal("delete resp_1 failed")
	}
	if diff := cmp.Diff([]string{"resp_0", "-", "resp_2"}, chainIDs(a, "resp_2")); diff != "" {
		t.Errorf("chain after another replica deleted resp_1 (-want +got):\n%s", diff)
	}
	b.c.Del(ctx, b.respKey("k", "resp_2")) // gone by Redis's own means (expiry, eviction)
	if got := chainIDs(a, "resp_2"); got != nil {
		t.Errorf("chain of a head gone from Redis: got %v, want nothing", got)
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
