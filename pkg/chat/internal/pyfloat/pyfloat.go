package pyfloat

import (
	"math"
	"strconv"
)

// Append appends f to b as Python's json.dumps writes a float: repr(f) for a finite f (the
// shortest digits that read back as f; positional from 1e-4 up to but not including 1e16, with
// ".0" added to an integral value; otherwise exponent form with a sign and at least two exponent
// digits, as in 1e+16 and 1.5e-05), and NaN, Infinity and -Infinity for the others.
func Append(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	for _, c := range b[start:] {
		if c == '.' || c == 'e' {
			return b
		}
	}
	return append(b, ".0"...)
}
