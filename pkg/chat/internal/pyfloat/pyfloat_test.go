package pyfloat

import (
	"math"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestAppend: the wants are Python 3's repr(f) (json.dumps(f) for the non-finite ones).
func TestAppend(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{1.5, "1.5"},
		{-2.25, "-2.25"},
		{100, "100.0"},
		{0.1, "0.1"},
		{1e-4, "0.0001"},
		{9.999999999999999e-05, "9.999999999999999e-05"},
		{1.5e-5, "1.5e-05"},
		{1e-7, "1e-07"},
		{5e-324, "5e-324"},
		{1e15, "1000000000000000.0"},
		{9999999999999998, "9999999999999998.0"},
		{1e16, "1e+16"},
		{123456789012345678, "1.2345678901234568e+17"},
		{1e22, "1e+22"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
		{math.Inf(-1), "-Infinity"},
	}
	for _, tt := range tests {
		if got := string(Append([]byte("x"), tt.f)); got != "x"+tt.want {
			t.Errorf("Append(%v): got %q, want %q", tt.f, got, "x"+tt.want)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 64)
	for i := 0; b.Loop(); i++ {
		buf = Append(buf[:0], float64(i)*0.37)
	}
}
