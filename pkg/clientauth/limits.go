package clientauth

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/kvgate/kvgate/pkg/openai"
)

// anonymousClient names the one client of a gateway without keys: the limits then bound the
// gateway as a whole.
const anonymousClient = "anonymous"

// client is the limiter state of one client key (Config.RateLimit, Config.MaxConcurrentPerKey)
// and its metrics. It outlives reloads of the keys (state).
//
// A client must not be copied.
type client struct {
	name     string
	lim      *rate.Limiter // nil: no rate limit
	max      int64         // 0: no concurrency limit
	inFlight atomic.Int64

	accepted             prometheus.Counter
	limitedRate, limConc prometheus.Counter
}

func (g *Guard) newClient(name string) *client {
	c := &client{name: name, max: int64(g.cfg.MaxConcurrentPerKey),
		accepted:    g.met.requests.WithLabelValues(name),
		limitedRate: g.met.limited.WithLabelValues(name, "rate"),
		limConc:     g.met.limited.WithLabelValues(name, "concurrency"),
	}
	if g.cfg.RateLimit > 0 {
		c.lim = rate.NewLimiter(rate.Limit(g.cfg.RateLimit), g.cfg.RateBurst)
	}
	return c
}

// admit takes one request of c's budget at now: a token of its rate limit and a slot of its
// concurrency limit, released by the returned func when the request (a whole stream
// included) ends. Over a limit it takes nothing and returns a 429 in the OpenAI shape, with
// Retry-After (seconds, RFC 9110 §10.2.3) and retry-after-ms (which OpenAI's SDKs prefer) set
// on h.
func (c *client) admit(h http.Header, now time.Time) (release func(), aerr *openai.Error) {
	if c.max > 0 && c.inFlight.Add(1) > c.max {
		c.inFlight.Add(-1)
		c.limConc.Inc()
		// A slot frees when some request of this key ends, which cannot be predicted.
		SetRetryAfter(h, time.Second)
		return nil, &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("too many concurrent requests for this API key (limit %d)", c.max)}
	}
	if c.lim != nil {
		res := c.lim.ReserveN(now, 1)
		if wait := res.DelayFrom(now); !res.OK() || wait > 0 {
			res.CancelAt(now)
			if c.max > 0 {
				c.inFlight.Add(-1)
			}
			c.limitedRate.Inc()
			SetRetryAfter(h, wait)
			return nil, &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "rate_limit_exceeded",
				Message: fmt.Sprintf("rate limit exceeded for this API key (%g requests/s, burst %d)", float64(c.lim.Limit()), c.lim.Burst())}
		}
	}
	c.accepted.Inc()
	if c.max == 0 {
		return func() {}, nil
	}
	return func() { c.inFlight.Add(-1) }, nil
}

// SetRetryAfter sets Retry-After to d rounded up to whole seconds (at least 1) and
// retry-after-ms to d in milliseconds (at least 1).
func SetRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 || d == rate.InfDuration {
		d = time.Second
	}
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(max(1, int64(math.Ceil(float64(d)/float64(time.Millisecond)))), 10))
}

// metrics counts client requests by key name (never by key) and authentication failures.
type metrics struct {
	requests     *prometheus.CounterVec // key
	limited      *prometheus.CounterVec // key, limit
	authFailures *prometheus.CounterVec // reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_client_requests_total",
			Help: "Requests admitted on the public API, by client key name (anonymous without --api-key).",
		}, []string{"key"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_client_limited_total",
			Help: "Requests answered 429 by a per-key limit, by client key name and limit (rate, concurrency).",
		}, []string{"key", "limit"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_client_auth_failures_total",
			Help: "Requests answered 401 on the public API, by reason (missing, malformed, wrong).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.limited, m.authFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("clientauth: register metrics: %w", err)
		}
	}
	return m, nil
}
