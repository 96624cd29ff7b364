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
		b.Run("depth="+itoa(depth), func(b *testing.B) {
			q, err := New[int](Config{MaxLen: depth + 1})
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
				tk, err := q.Enqueue(Request[int]{Priority: 0, Key: keys[i%4], Cost: 100, Score: score})
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := q.Next(i); !ok {
					b.Fatal("no grant")
				}
				if _, err := q.Wait(ctx, tk, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
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
