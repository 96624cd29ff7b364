package conversation

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisConfig configures a Redis store.
type RedisConfig struct {
	// URL is redis://[[USER]:PASSWORD@]HOST:PORT/DB (rediss:// for TLS).
	URL string
	// TTL is how long an entry nobody reads or writes is kept (default 24 h); every read
	// renews what it read.
	TTL time.Duration
	// Prefix starts every key (default "kvgate:"), so that one Redis can serve other uses.
	Prefix string
	// Timeout bounds each operation, connecting included (default 1 s): a Redis that does
	// not answer turns into a 503 for the turns that need it, not a hung request.
	Timeout time.Duration
	// CacheBytes bounds the records this replica keeps of what it wrote and read, so that a
	// follow-up reads only what it lacks (GetChain; default DefaultCacheBytes, negative: none).
	CacheBytes int
	// Registerer receives the store's round-trip histogram (nil: not registered).
	Registerer prometheus.Registerer
}

// DefaultCacheBytes is RedisConfig.CacheBytes when zero.
const DefaultCacheBytes = 64 << 20

// Redis is the Store shared by several gateway replicas (and kept across their restarts): a
// follow-up may land on any replica and find its chain. Each response record is one string
// key (resp:SCOPE:ID, the encoding of record.go) with a TTL renewed by reads (GETEX); a
// conversation is its metadata key (conv:SCOPE:ID) and a list of its items (items:SCOPE:ID).
// A turn's record is written by one SET, which has returned before the client sees the
// response, so any replica finds it; its chain is read in one round trip (or two, GetChain),
// which on the replica holding the chain overlaps the caller's work or joins the write
// (LocalChain).
// Redis itself bounds the memory: give it a maxmemory and a maxmemory-policy such as
// volatile-lru (docs/responses.md).
//
// The client is github.com/redis/go-redis/v9, Redis's own Go client (the redis organisation
// maintains it, it follows every Redis release, and it is the most used): pooled connections,
// pipelines, scripts, context deadlines on every call, and RESP2/3.
// rueidis, the other client the redis organisation keeps, adds client-side caching and
// automatic pipelining that the store does not need, through a command-builder API. Safe for
// concurrent use; Close releases its connections.
type Redis struct {
	c      *redis.Client
	ttl    time.Duration
	prefix string
	// appendScript appends items to a conversation only while it exists.
	appendScript *redis.Script
	// cache holds records this replica wrote or read, for GetChain.
	cache *recordCache
}

// NewRedis validates cfg and returns a store; it does not connect until the first call.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("conversation: redis url: %w", err)
	}
	if cfg.TTL < 0 || cfg.Timeout < 0 {
		return nil, errors.New("conversation: redis: ttl and timeout must not be negative")
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "kvgate:"
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	opt.MaxRetries = 0 // a failed call is answered at once (503); the client retries the turn
	opt.DialerRetries = 1
	opt.ContextTimeoutEnabled = true
	rt, err := newRoundTrips(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	c.AddHook(rt)
	return &Redis{c: c, ttl: cfg.TTL, prefix: cfg.Prefix, cache: newRecordCache(cfg.CacheBytes, cfg.TTL), appendScript: redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 2, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1`)}, nil
}

// Close releases the connections.
func (r *Redis) Close() error { return r.c.Close() }

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error { return unavailable(r.c.Ping(ctx).Err()) }

func (r *Redis) respKey(scope, id string) string  { return r.prefix + "resp:" + scope + ":" + id }
func (r *Redis) convKey(scope, id string) string  { return r.prefix + "conv:" + scope + ":" + id }
func (r *Redis) itemsKey(scope, id string) string { return r.prefix + "items:" + scope + ":" + id }

// unavailable wraps a client error (not redis.Nil) in ErrUnavailable.
func unavailable(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// GetResponses implements Store: one pipeline of GETEX (renewing each record's TTL).
func (r *Redis) GetResponses(ctx context.Context, scope string, ids []string) ([]*Record, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.GetEx(ctx, r.respKey(scope, id), r.ttl)
		}
		return nil
	})
	if err := unavailable(err); err != nil {
		return nil, err
	}
	out := make([]*Record, len(ids))
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, unavailable(err)
		}
		if out[i], err = decodeRecord(b); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, ids[i], err)
		}
		r.cache.put(scope, out[i])
	}
	return out, nil
}

// GetChain implements Store. Records are never modified once stored, so a replica keeps
// those it wrote or read (cache) and asks Redis only whether they are still there, renewing
// them (PEXPIRE), in the same pipeline that reads the ones it lacks (GETEX): one round trip
// when the head is known here (the replica wrote the previous turn), two when it is not (the
// head names the ancestors). A record deleted or expired in Redis is missing whatever the
// cache holds.
func (r *Redis) GetChain(ctx context.Context, scope, id string) ([]*Record, error) {
	head := r.cache.get(scope, id)
	known := head != nil
	if !known {
		recs, err := r.GetResponses(ctx, scope, []string{id})
		if err != nil || recs[0] == nil {
			return nil, err
		}
		head = recs[0]
	}
	out := make([]*Record, len(head.Ancestors)+1)
	out[len(out)-1] = head
	ids := head.Ancestors
	if known {
		ids = append(ids[:len(ids):len(ids)], id)
	}
	if len(ids) == 0 {
		return out, nil
	}
	gets := make([]*redis.StringCmd, len(ids))
	exps := make([]*redis.BoolCmd, len(ids))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range ids {
			if out[i] = r.cache.get(scope, a); out[i] != nil {
				exps[i] = p.PExpire(ctx, r.respKey(scope, a), r.ttl)
			} else {
				gets[i] = p.GetEx(ctx, r.respKey(scope, a), r.ttl)
			}
		}
		return nil
	})
	if err := unavailable(err); err != nil {
		return nil, err
	}
	for i, a := range ids {
		if err := r.chainRecord(scope, a, out, i, gets[i], exps[i]); err != nil {
			return nil, err
		}
	}
	if out[len(out)-1] == nil {
		return nil, nil // the head was deleted or expired in Redis
	}
	return out, nil
}

// The chain of a follow-up on the replica that holds it, in the caller's order of work: the
// copies at once (LocalChain), then Redis's word that they are all still there, renewing them
// (PEXPIRE), either in the background while the caller renders (StartRenew), or in the same
// round trip as the turn's own record (PutRenewing) or alone (RenewChain) when the caller can
// wait to the end. Each returns the chain as GetChain would: nil where a record was deleted
// or expired in Redis (on any replica), nil when the head was; the copies are a guess until
// then.

// LocalChain returns the chain ending with id from this replica's copies, nil unless it holds
// every record of it.
func (r *Redis) LocalChain(scope, id string) []*Record {
	head := r.cache.get(scope, id)
	if head == nil {
		return nil
	}
	local := make([]*Record, len(head.Ancestors)+1)
	local[len(local)-1] = head
	for i, a := range head.Ancestors {
		if local[i] = r.cache.get(scope, a); local[i] == nil {
			return nil
		}
	}
	return local
}

// StartRenew sends the renewal of a chain from LocalChain now and returns the wait for its
// answer.
func (r *Redis) StartRenew(ctx context.Context, scope string, chain []*Record) (wait func() ([]*Record, error)) {
	done := make(chan struct{})
	var out []*Record
	var err error
	go func() {
		defer close(done)
		out, err = r.RenewChain(ctx, scope, chain)
	}()
	// Let the renewal send its commands now: on a busy machine the new goroutine would
	// otherwise wait for this one to block, after the rendering it is meant to overlap.
	runtime.Gosched()
	return func() ([]*Record, error) {
		<-done
		return out, err
	}
}

// RenewChain renews a chain from LocalChain in one pipeline.
func (r *Redis) RenewChain(ctx context.Context, scope string, chain []*Record) ([]*Record, error) {
	return r.renewPut(ctx, scope, chain, nil)
}

// PutResponseRenewing is PutResponse and RenewChain of the chain rec continues, in one
// pipeline. When the chain turns out cut, rec is removed again (its id was never given to
// anyone) and the chain is returned as it is.
func (r *Redis) PutResponseRenewing(ctx context.Context, scope string, rec *Record, chain []*Record) ([]*Record, error) {
	return r.renewPut(ctx, scope, chain, rec)
}

func (r *Redis) renewPut(ctx context.Context, scope string, chain []*Record, rec *Record) ([]*Record, error) {
	exps := make([]*redis.BoolCmd, len(chain))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range chain {
			exps[i] = p.PExpire(ctx, r.respKey(scope, c.ID), r.ttl)
		}
		if rec != nil {
			p.Set(ctx, r.respKey(scope, rec.ID), encodeRecord(rec), r.ttl)
		}
		return nil
	})
	if err := unavailable(err); err != nil {
		return nil, err
	}
	out := append([]*Record(nil), chain...)
	cut := false
	for i, c := range chain {
		if !exps[i].Val() {
			out[i], cut = nil, true
			r.cache.remove(scope, c.ID)
		}
	}
	if cut && rec != nil {
		if err := unavailable(r.c.Del(ctx, r.respKey(scope, rec.ID)).Err()); err != nil {
			return nil, err
		}
	} else if rec != nil {
		r.cache.put(scope, rec)
	}
	if out[len(out)-1] == nil {
		return nil, nil
	}
	return out, nil
}

// chainRecord settles out[i], the record of id, from its pipelined command: a cached record
// still there (exp), or one read (get).
func (r *Redis) chainRecord(scope, id string, out []*Record, i int, get *redis.StringCmd, exp *redis.BoolCmd) error {
	if exp != nil {
		if !exp.Val() {
			out[i] = nil
			r.cache.remove(scope, id)
		}
		return nil
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return unavailable(err)
	}
	if out[i], err = decodeRecord(b); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, id, err)
	}
	r.cache.put(scope, out[i])
	return nil
}

// PutResponse implements Store.
func (r *Redis) PutResponse(ctx context.Context, scope string, rec *Record) error {
	if err := unavailable(r.c.Set(ctx, r.respKey(scope, rec.ID), encodeRecord(rec), r.ttl).Err()); err != nil {
		return err
	}
	r.cache.put(scope, rec)
	return nil
}

// DeleteResponse implements Store.
func (r *Redis) DeleteResponse(ctx context.Context, scope, id string) (bool, error) {
	r.cache.remove(scope, id)
	n, err := r.c.Del(ctx, r.respKey(scope, id)).Result()
	return n > 0, unavailable(err)
}

// encodeConversation is a conversation's metadata key: created-at as a varint, then the
// metadata JSON.
func encodeConversation(c *Conversation) []byte {
	return append(binary.AppendVarint(nil, c.CreatedAt), c.Metadata...)
}

func decodeConversation(id string, b []byte) (*Conversation, error) {
	t, k := binary.Varint(b)
	if k <= 0 {
		return nil, errBadRecord
	}
	return &Conversation{ID: id, CreatedAt: t, Metadata: b[k:]}, nil
}

// GetConversation implements Store, renewing the conversation and its items.
func (r *Redis) GetConversation(ctx context.Context, scope, id string) (*Conversation, error) {
	var get *redis.StringCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.GetEx(ctx, r.convKey(scope, id), r.ttl)
		p.PExpire(ctx, r.itemsKey(scope, id), r.ttl)
		return nil
	})
	if err := unavailable(err); err != nil {
		return nil, err
	}
	b, err := get.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return decodeConversation(id, b)
}

// PutConversation implements Store.
func (r *Redis) PutConversation(ctx context.Context, scope string, c *Conversation) error {
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.convKey(scope, c.ID), encodeConversation(c), r.ttl)
		p.PExpire(ctx, r.itemsKey(scope, c.ID), r.ttl)
		return nil
	})
	return unavailable(err)
}

// ConversationItems implements Store: the metadata (renewed) and the items in one pipeline.
func (r *Redis) ConversationItems(ctx context.Context, scope, id string) ([][]byte, bool, error) {
	var exists *redis.IntCmd
	var items *redis.StringSliceCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, r.convKey(scope, id))
		p.PExpire(ctx, r.convKey(scope, id), r.ttl)
		items = p.LRange(ctx, r.itemsKey(scope, id), 0, -1)
		p.PExpire(ctx, r.itemsKey(scope, id), r.ttl)
		return nil
	})
	if err := unavailable(err); err != nil {
		return nil, false, err
	}
	if exists.Val() == 0 {
		return nil, false, nil
	}
	vals := items.Val()
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out, true, nil
}

// AppendItems implements Store with a script that appends only to an existing conversation.
func (r *Redis) AppendItems(ctx context.Context, scope, id string, items [][]byte) (bool, error) {
	args := make([]any, 0, len(items)+1)
	args = append(args, strconv.FormatInt(r.ttl.Milliseconds(), 10))
	for _, it := range items {
		args = append(args, it)
	}
	n, err := r.appendScript.Run(ctx, r.c, []string{r.convKey(scope, id), r.itemsKey(scope, id)}, args...).Int()
	if err := unavailable(err); err != nil {
		return false, err
	}
	return n == 1, nil
}

// DeleteItem implements Store.
func (r *Redis) DeleteItem(ctx context.Context, scope, id, itemID string) (bool, error) {
	items, ok, err := r.ConversationItems(ctx, scope, id)
	if err != nil || !ok {
		return false, err
	}
	for _, it := range items {
		if itemIDOf(it) == itemID {
			n, err := r.c.LRem(ctx, r.itemsKey(scope, id), 1, it).Result()
			return n > 0, unavailable(err)
		}
	}
	return false, nil
}

// DeleteConversation implements Store.
func (r *Redis) DeleteConversation(ctx context.Context, scope, id string) (bool, error) {
	var del *redis.IntCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, r.convKey(scope, id))
		p.Del(ctx, r.itemsKey(scope, id))
		return nil
	})
	if err := unavailable(err); err != nil {
		return false, err
	}
	return del.Val() > 0, nil
}

var _ Store = (*Redis)(nil)
