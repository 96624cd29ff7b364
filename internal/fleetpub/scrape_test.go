package fleetpub

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestScrapeLookupQuantiles serves a histogram built as the gateway builds its lookup
// histogram, over a real loopback listener, observes a skewed latency sample in two rounds, and
// checks that the quantiles fleetpub reads between the two scrapes are the sample's own, within
// a bucket's width (the classic buckets alone put this sample's p99 somewhere in 977 µs–2.4 ms).
func TestScrapeLookupQuantiles(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:                            lookupFamily,
		Help:                            "test",
		Buckets:                         prometheus.ExponentialBuckets(1e-6, 2.5, 15),
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	})
	reg.MustRegister(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/metrics"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}

	rng := rand.New(rand.NewPCG(1, 2))
	sample := func(n int) []float64 { // a body near 180 µs and a tail to 2 ms
		v := make([]float64, n)
		for i := range v {
			v[i] = 150e-6 + 60e-6*rng.Float64()
			if rng.IntN(20) == 0 {
				v[i] = 250e-6 + 1.75e-3*rng.Float64()
			}
			h.Observe(v[i])
		}
		return v
	}
	sample(3000) // before the first scrape: must not count
	before, err := scrape(ctx, client, url)
	if err != nil {
		t.Fatal(err)
	}
	got := sample(5000)
	end, err := scrape(ctx, client, url)
	if err != nil {
		t.Fatal(err)
	}
	if end.native.counts == nil {
		t.Fatal("the scrape found no native buckets")
	}
	if n := end.sum(lookupFamily+"_count") - before.sum(lookupFamily+"_count"); n != 5000 {
		t.Fatalf("count between the scrapes = %v, want 5000", n)
	}
	sort.Float64s(got)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := got[int(q*float64(len(got)-1))]
		native := lookupQuantile(before, end, q)
		if math.Abs(native-want)/want > 0.1 {
			t.Errorf("p%v: native %.1f µs, sample %.1f µs: off by more than a bucket", q*100, native*1e6, want*1e6)
		}
	}
}

// TestNativeQuantileSchemaChange refuses to subtract scrapes of different resolutions.
func TestNativeQuantileSchemaChange(t *testing.T) {
	a := nativeHist{schema: 3, counts: map[int]float64{10: 1}}
	b := nativeHist{schema: 2, counts: map[int]float64{5: 3}}
	if v := nativeQuantile(a, b, 0.5); !math.IsNaN(v) {
		t.Fatalf("quantile across a schema change = %v, want NaN", v)
	}
	if v := nativeQuantile(nativeHist{}, b, 0.5); math.IsNaN(v) {
		t.Fatal("quantile from an empty first scrape is NaN")
	}
}
