package admission

import (
	"context"
	"testing"
)

// BenchmarkAdmit measures one request through a queue already holding depth waiters of four
// keys in two bands: Enqueue, the Next a freed slot makes (scoring the look-ahead), and Wait on
// the grant.
func BenchmarkAdmit(b *testing.B) {
	for _, depth := range []int{0, 100, 1000} {
		b.Run("depth="+itoa(depth), func(b *testing.B) { admit(b, depth, 0, 0) })
	}
}

// BenchmarkHandOff measures a hand-off from a deep band, look-ahead requests scored each time
// (BenchmarkAdmit's Next scores only the one request of the better band): Enqueue, the Next
// and Wait on the ticket granted. The score callback is trivial, so this is the queue's own
// cost per scored request; the pipeline's Score adds a prefix lookup per request.
func BenchmarkHandOff(b *testing.B) {
	for _, la := range []int{8, 32} {
		b.Run("lookahead="+itoa(la), func(b *testing.B) { admit(b, 1000, la, 1) })
	}
}

// admit enqueues depth waiters of band 1, then per op one request of band prio, a Next and a
// Wait on its grant, with look-ahead la (0: the default).
func admit(b *testing.B, depth, la, prio int) {
	q, err := New[int](Config{MaxLen: depth + 1, LookAhead: la})
	if err != nil {
		b.Fatal(err)
	}
	score := func(w int) Fit { return Fit{Matched: w & 3, OK: true} }
	keys := []string{"a", "b", "c", "d"}
	for i := range depth {
		if _, err := q.Enqueue(Request[int]{Priority: 1, Key: keys[i%4], Cost: 100, Score: score}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := q.Enqueue(Request[int]{Priority: prio, Key: keys[i%4], Cost: 100, Score: score}); err != nil {
			b.Fatal(err)
		}
		tk, ok := q.Next(i)
		if !ok {
			b.Fatal("no grant")
		}
		if _, err := q.Wait(ctx, tk, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
