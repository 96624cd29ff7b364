package parse

import (
	"strconv"

	"github.com/kvgate/kvgate/pkg/chat/internal/pyfloat"
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
			emitting := m.emitting
			ev, ok := m.endNumber()
			if !ok {
				return jMore, false
			}
			m.termEnd = emitting && !m.emitting // c is past the arguments the number ended
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
		m.out = pyfloat.Append(m.out, f)
	}
	return true
}
