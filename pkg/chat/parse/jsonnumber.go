package parse

import (
	"math"
	"strconv"
)

// Numbers of the JSON re-formatter: the grammar of Python's NUMBER_RE, ints written as
// Python's int() reads them back, floats as repr(float(text)).

func (m *jsonMachine) numByte(c byte) (jevent, bool) {
	isDigit := c >= '0' && c <= '9'
	next := m.numSt
	switch m.numSt {
	case nSign:
		switch {
		case c == '0':
			next = nZero
		case isDigit:
			next = nInt
		case c == 'I':
			m.lit, m.litPos, m.st = "-Infinity", 2, jLit
			return jMore, true
		default:
			return jMore, false
		}
	case nZero, nInt, nFrac, nExp:
		switch {
		case isDigit && m.numSt != nZero:
		case c == '.' && (m.numSt == nZero || m.numSt == nInt):
			next = nDot
		case (c == 'e' || c == 'E') && m.numSt != nExp:
			next = nE
		default:
			// c ends the number; it is then read as what follows a value.
			ev, ok := m.endNumber()
			if !ok {
				return jMore, false
			}
			if ev == jDone {
				m.unread = true // the number was the whole value: c is past its end
				return jDone, true
			}
			return m.step(c)
		}
	case nDot:
		if !isDigit {
			return jMore, false
		}
		next = nFrac
	case nE:
		switch {
		case c == '+' || c == '-':
			next = nESign
		case isDigit:
			next = nExp
		default:
			return jMore, false
		}
	case nESign:
		if !isDigit {
			return jMore, false
		}
		next = nExp
	}
	if len(m.num) >= m.limit {
		return jMore, false
	}
	m.num = append(m.num, c)
	m.numSt = next
	return jMore, true
}

// endNumber formats the finished number into the output and ends the value.
func (m *jsonMachine) endNumber() (jevent, bool) {
	if !m.formatNumber() {
		return jMore, false
	}
	return m.endValue()
}

// formatNumber writes the finished number m.num; it reports false for an int Python rejects.
func (m *jsonMachine) formatNumber() bool {
	s := m.num
	isInt := true
	for _, c := range s {
		if c == '.' || c == 'e' || c == 'E' {
			isInt = false
			break
		}
	}
	if isInt {
		digits := len(s)
		if s[0] == '-' {
			digits--
		}
		if digits > maxPyIntDigits {
			return false
		}
		if m.emitting && !m.raw {
			if len(s) == 2 && s[0] == '-' && s[1] == '0' {
				m.out = append(m.out, '0')
			} else {
				m.out = append(m.out, s...)
			}
		}
	} else if m.emitting && !m.raw {
		f, _ := strconv.ParseFloat(string(s), 64) // syntax already checked; out of range gives ±Inf or 0 as Python's float()
		m.out = appendPyFloat(m.out, f)
	}
	return true
}

// appendPyFloat writes f as Python's repr(float) (and so json.dumps) does.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	case f == 0:
		if math.Signbit(f) {
			return append(b, "-0.0"...)
		}
		return append(b, "0.0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // [-]d[.ddd]e±XX, shortest round trip
	if e[0] == '-' {
		b = append(b, '-')
		e = e[1:]
	}
	var digits [24]byte
	nd := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[nd] = e[i]
			nd++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	decpt := exp + 1 // value = 0.DIGITS × 10^decpt
	if decpt <= -4 || decpt > 16 {
		b = append(b, digits[0])
		if nd > 1 {
			b = append(b, '.')
			b = append(b, digits[1:nd]...)
		}
		b = append(b, 'e')
		if exp < 0 {
			b = append(b, '-')
			exp = -exp
		} else {
			b = append(b, '+')
		}
		if exp < 10 {
			b = append(b, '0')
		}
		return strconv.AppendInt(b, int64(exp), 10)
	}
	switch {
	case decpt <= 0:
		b = append(b, '0', '.')
		for k := 0; k < -decpt; k++ {
			b = append(b, '0')
		}
		b = append(b, digits[:nd]...)
	case decpt >= nd:
		b = append(b, digits[:nd]...)
		for k := nd; k < decpt; k++ {
			b = append(b, '0')
		}
		b = append(b, '.', '0')
	default:
		b = append(b, digits[:decpt]...)
		b = append(b, '.')
		b = append(b, digits[decpt:nd]...)
	}
	return b
}
