package parse

import "unicode/utf8"

// jsonMachine validates JSON incrementally with the grammar of Python's json.loads (strict
// strings; NaN, Infinity and -Infinity accepted; ints longer than 4300 digits rejected as
// CPython's int() does) and writes the arguments value re-formatted as json.dumps writes it
// (separators ", " and ": ", Python float repr, ints as written except -0 -> 0, string escapes
// as Python's encoder, non-ASCII raw or \uXXXX per ascii). Output goes to out as soon as each
// token is complete, so the held state is one number, one escape or one UTF-8 sequence.
//
// envDepth says where the arguments are:
//   - 0: the whole value is the arguments (Harmony, a named tool_choice is not parsed);
//   - 1: the value is an envelope object {"name": "...", "<argKey>": ARGS, ...};
//   - 2: the value is an array of such envelopes; jEnvEnd is returned after each one.
//
// For envelopes, the first "name" key whose value is a string gives the name and the first of
// the argKeys gives the arguments; other members are validated and dropped. Duplicate keys
// therefore keep the first value (json.loads keeps the last: see vllmdiff.go).
type jsonMachine struct {
	ascii    bool
	raw      bool
	envDepth int
	argKeys  []string
	limit    int

	st        jstate
	stack     []byte
	emitting  bool
	emitDepth int
	termEnd   bool // the byte just stepped ended the arguments without being part of them
	unread    bool
	done      bool

	strRole uint8
	inKey   bool
	uN      int
	uVal    rune
	hi      rune
	utf     [4]byte
	utfN    int
	num     []byte
	numSt   uint8
	lit     string
	litPos  int

	key      []byte
	keyLong  bool
	valRole  uint8
	name     []byte
	nameDone bool
	nameBad  bool
	argsSeen bool
	argsDone bool

	out []byte
}

type jstate uint8

const (
	jValue jstate = iota
	jArrFirst
	jObjFirst
	jObjKey
	jColon
	jAfter
	jStr
	jStrEsc
	jStrU
	jNum
	jLit
	jEnd
)

type jevent uint8

const (
	jMore   jevent = iota // input consumed, value not complete
	jErr                  // syntax error at the returned offset (that byte not consumed)
	jEnvEnd               // an envelope object of an array closed
	jDone                 // the whole value is complete
)

const (
	strEmit = 1 << iota
	strKey
	strName
)

const (
	roleSkip uint8 = iota
	roleName
	roleArgs
)

const (
	nSign uint8 = iota
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

const (
	maxJSONDepth   = 512
	maxPyIntDigits = 4300
	maxKeyBytes    = 32
)

// reset prepares m for a new value, keeping its configuration and buffers.
func (m *jsonMachine) reset() {
	m.st = jValue
	m.stack = m.stack[:0]
	m.emitting, m.emitDepth, m.termEnd, m.done = false, 0, false, false
	m.hi, m.utfN, m.uN = 0, 0, 0
	m.resetEnvelope()
	m.out = m.out[:0]
}

func (m *jsonMachine) resetEnvelope() {
	m.key = m.key[:0]
	m.keyLong = false
	m.valRole = roleSkip
	m.name = m.name[:0]
	m.nameDone, m.nameBad, m.argsSeen, m.argsDone = false, false, false, false
}

// inArgs reports whether the machine is inside the arguments value.
func (m *jsonMachine) inArgs() bool { return m.emitting }

// feed consumes b until the input ends, an error, an envelope end (envDepth 2) or the end of
// the value, and returns how many bytes it consumed.
func (m *jsonMachine) feed(b []byte) (int, jevent) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		was := m.emitting
		m.termEnd = false
		ev, ok := m.step(c)
		if !ok {
			m.flushToken()
			return i, jErr
		}
		if m.unread {
			m.unread = false
			return i, ev
		}
		if m.raw && (m.emitting || (was && !m.termEnd)) {
			m.out = append(m.out, c)
		}
		if ev != jMore {
			return i + 1, ev
		}
	}
	return len(b), jMore
}

// end tells the machine its input has ended; it completes a top-level number and reports
// whether the value is complete.
func (m *jsonMachine) end() bool {
	if m.st == jNum {
		switch m.numSt {
		case nZero, nInt, nFrac, nExp:
			if len(m.stack) == 0 {
				m.endNumber()
			} else if m.formatNumber() {
				m.st = jEnd // a truncated container: the number is the last thing sent
			}
		}
	}
	return m.done
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (m *jsonMachine) step(c byte) (jevent, bool) {
	switch m.st {
	case jValue:
		if isJSONSpace(c) {
			return jMore, true
		}
		return m.startValue(c)
	case jArrFirst:
		if isJSONSpace(c) {
			return jMore, true
		}
		if c == ']' {
			return m.closeContainer('[', ']')
		}
		return m.startValue(c)
	case jObjFirst, jObjKey:
		if isJSONSpace(c) {
			return jMore, true
		}
		if c == '}' && m.st == jObjFirst {
			return m.closeContainer('{', '}')
		}
		if c != '"' {
			return jMore, false
		}
		m.startString(true)
		return jMore, true
	case jColon:
		if isJSONSpace(c) {
			return jMore, true
		}
		if c != ':' {
			return jMore, false
		}
		m.emitStr(": ")
		m.st = jValue
		return jMore, true
	case jAfter:
		return m.after(c)
	case jStr:
		return m.strByte(c)
	case jStrEsc:
		return m.escByte(c)
	case jStrU:
		return m.hexByte(c)
	case jNum:
		return m.numByte(c)
	case jLit:
		if c != m.lit[m.litPos] {
			return jMore, false
		}
		m.litPos++
		if m.litPos == len(m.lit) {
			m.emitStr(m.lit)
			return m.endValue()
		}
		return jMore, true
	}
	return jMore, false
}

func (m *jsonMachine) emitByte(c byte) {
	if m.emitting && !m.raw {
		m.out = append(m.out, c)
	}
}

func (m *jsonMachine) emitStr(s string) {
	if m.emitting && !m.raw {
		m.out = append(m.out, s...)
	}
}

func (m *jsonMachine) startValue(c byte) (jevent, bool) {
	d := len(m.stack)
	switch {
	case d < m.envDepth:
		want := byte('{')
		if m.envDepth == 2 && d == 0 {
			want = '['
		}
		if c != want {
			return jMore, false
		}
		if want == '{' {
			m.resetEnvelope()
		}
	case d == m.envDepth && m.envDepth > 0:
		m.valRole = m.roleForKey()
		switch m.valRole {
		case roleArgs:
			m.emitting, m.emitDepth, m.argsSeen = true, d, true
		case roleName:
			if c != '"' {
				m.nameBad = true
				m.valRole = roleSkip
			}
		}
	case m.envDepth == 0 && d == 0:
		m.emitting, m.emitDepth, m.argsSeen = true, 0, true
	}
	switch {
	case c == '{' || c == '[':
		if d >= maxJSONDepth {
			return jMore, false
		}
		m.stack = append(m.stack, c)
		m.emitByte(c)
		if c == '{' {
			m.st = jObjFirst
		} else {
			m.st = jArrFirst
		}
	case c == '"':
		m.startString(false)
	case c == '-' || (c >= '0' && c <= '9'):
		m.num = append(m.num[:0], c)
		switch {
		case c == '-':
			m.numSt = nSign
		case c == '0':
			m.numSt = nZero
		default:
			m.numSt = nInt
		}
		m.st = jNum
	default:
		switch c {
		case 't':
			m.lit = "true"
		case 'f':
			m.lit = "false"
		case 'n':
			m.lit = "null"
		case 'N':
			m.lit = "NaN"
		case 'I':
			m.lit = "Infinity"
		default:
			return jMore, false
		}
		m.litPos = 1
		m.st = jLit
	}
	return jMore, true
}

func (m *jsonMachine) roleForKey() uint8 {
	if m.keyLong {
		return roleSkip
	}
	if string(m.key) == "name" {
		if m.nameDone || m.nameBad {
			return roleSkip
		}
		return roleName
	}
	if !m.argsSeen {
		for _, a := range m.argKeys {
			if string(m.key) == a {
				return roleArgs
			}
		}
	}
	return roleSkip
}

func (m *jsonMachine) endValue() (jevent, bool) {
	d := len(m.stack)
	if m.emitting && d == m.emitDepth {
		m.emitting = false
		m.argsDone = true
	}
	if m.envDepth > 0 && d == m.envDepth {
		if m.valRole == roleName {
			m.nameDone = true
		}
		m.valRole = roleSkip
	}
	m.st = jAfter
	if d == 0 {
		m.st = jEnd
		m.done = true
		return jDone, true
	}
	return jMore, true
}

func (m *jsonMachine) closeContainer(open, close byte) (jevent, bool) {
	n := len(m.stack)
	if n == 0 || m.stack[n-1] != open {
		return jMore, false
	}
	m.stack = m.stack[:n-1]
	m.emitByte(close)
	envEnd := m.envDepth == 2 && n-1 == 1
	ev, ok := m.endValue()
	if envEnd && ev == jMore {
		return jEnvEnd, ok
	}
	return ev, ok
}

func (m *jsonMachine) after(c byte) (jevent, bool) {
	if isJSONSpace(c) {
		return jMore, true
	}
	n := len(m.stack)
	if n == 0 {
		return jMore, false
	}
	top := m.stack[n-1]
	switch {
	case c == ',':
		m.emitStr(", ")
		if top == '{' {
			m.st = jObjKey
		} else {
			m.st = jValue
		}
		return jMore, true
	case c == '}' && top == '{':
		return m.closeContainer('{', '}')
	case c == ']' && top == '[':
		return m.closeContainer('[', ']')
	}
	return jMore, false
}

func (m *jsonMachine) startString(key bool) {
	m.strRole = 0
	m.inKey = key
	if m.emitting {
		m.strRole |= strEmit
		m.emitByte('"')
	}
	if m.envDepth > 0 && len(m.stack) == m.envDepth {
		if key && m.stack[len(m.stack)-1] == '{' {
			m.strRole |= strKey
			m.key = m.key[:0]
			m.keyLong = false
		} else if !key && m.valRole == roleName {
			m.strRole |= strName
			m.name = m.name[:0]
		}
	}
	m.hi, m.utfN = 0, 0
	m.st = jStr
}

func (m *jsonMachine) strByte(c byte) (jevent, bool) {
	switch {
	case c == '"':
		m.flushHi()
		m.flushUTF()
		if m.strRole&strEmit != 0 {
			m.emitByte('"')
		}
		if m.inKey {
			m.inKey = false
			m.st = jColon
			return jMore, true
		}
		return m.endValue()
	case c == '\\':
		m.flushUTF()
		m.st = jStrEsc
		return jMore, true
	case c < 0x20:
		return jMore, false
	}
	m.flushHi()
	if m.strRole&(strKey|strName) != 0 {
		if !m.collect(c) {
			return jMore, false
		}
	}
	if m.strRole&strEmit == 0 || m.raw {
		return jMore, true
	}
	switch {
	case c < 0x7f:
		m.flushUTF()
		m.out = append(m.out, c)
	case !m.ascii:
		m.out = append(m.out, c) // DEL and non-ASCII bytes are written as they are
	case c == 0x7f:
		m.flushUTF()
		m.out = append(m.out, `\u007f`...)
	default:
		m.utf8Byte(c)
	}
	return jMore, true
}

// collect appends a raw string byte to the key or name being read.
func (m *jsonMachine) collect(c byte) bool {
	if m.strRole&strKey != 0 {
		if len(m.key) >= maxKeyBytes {
			m.keyLong = true
		} else {
			m.key = append(m.key, c)
		}
		return true
	}
	if len(m.name) >= m.limit {
		return false
	}
	m.name = append(m.name, c)
	return true
}

func (m *jsonMachine) collectRune(r rune) bool {
	if m.strRole&(strKey|strName) == 0 {
		return true
	}
	if r >= 0xD800 && r <= 0xDFFF {
		r = utf8.RuneError
	}
	var b [4]byte
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		if !m.collect(c) {
			return false
		}
	}
	return true
}

// utf8Byte collects a raw non-ASCII byte for ensure_ascii output.
func (m *jsonMachine) utf8Byte(c byte) {
	if m.utfN > 0 && c&0xC0 != 0x80 {
		m.flushUTF()
	}
	if m.utfN == 0 && c&0xC0 == 0x80 {
		m.emitRune(utf8.RuneError)
		return
	}
	m.utf[m.utfN] = c
	m.utfN++
	if utf8.FullRune(m.utf[:m.utfN]) {
		r, size := utf8.DecodeRune(m.utf[:m.utfN])
		if r == utf8.RuneError && size <= 1 {
			m.flushUTF()
			return
		}
		m.utfN = 0
		m.emitRune(r)
	}
}

// flushUTF writes an incomplete UTF-8 sequence as replacement characters.
func (m *jsonMachine) flushUTF() {
	for m.utfN > 0 {
		r, size := utf8.DecodeRune(m.utf[:m.utfN])
		m.emitRune(r)
		copy(m.utf[:], m.utf[size:m.utfN])
		m.utfN -= size
	}
}

func (m *jsonMachine) escByte(c byte) (jevent, bool) {
	var r rune
	switch c {
	case '"', '\\', '/':
		r = rune(c)
	case 'b':
		r = '\b'
	case 'f':
		r = '\f'
	case 'n':
		r = '\n'
	case 'r':
		r = '\r'
	case 't':
		r = '\t'
	case 'u':
		m.st, m.uN, m.uVal = jStrU, 0, 0
		return jMore, true
	default:
		return jMore, false
	}
	m.flushHi()
	m.st = jStr
	return jMore, m.strRune(r)
}

func (m *jsonMachine) hexByte(c byte) (jevent, bool) {
	var v rune
	switch {
	case c >= '0' && c <= '9':
		v = rune(c - '0')
	case c >= 'a' && c <= 'f':
		v = rune(c-'a') + 10
	case c >= 'A' && c <= 'F':
		v = rune(c-'A') + 10
	default:
		return jMore, false
	}
	m.uVal = m.uVal<<4 | v
	m.uN++
	if m.uN < 4 {
		return jMore, true
	}
	m.st = jStr
	r := m.uVal
	if m.hi != 0 {
		if r >= 0xDC00 && r <= 0xDFFF {
			pair := 0x10000 + (m.hi-0xD800)<<10 + (r - 0xDC00)
			m.hi = 0
			return jMore, m.strRune(pair)
		}
		m.flushHi()
	}
	if r >= 0xD800 && r <= 0xDBFF {
		m.hi = r
		return jMore, true
	}
	return jMore, m.strRune(r)
}

// flushHi writes a pending high surrogate that no low surrogate followed.
func (m *jsonMachine) flushHi() {
	if m.hi != 0 {
		r := m.hi
		m.hi = 0
		m.strRune(r)
	}
}

func (m *jsonMachine) strRune(r rune) bool {
	if !m.collectRune(r) {
		return false
	}
	if m.strRole&strEmit != 0 && !m.raw {
		m.emitRune(r)
	}
	return true
}

// emitRune writes r as Python's json encoder does inside a string.
func (m *jsonMachine) emitRune(r rune) {
	switch r {
	case '"':
		m.out = append(m.out, `\"`...)
		return
	case '\\':
		m.out = append(m.out, `\\`...)
		return
	case '\n':
		m.out = append(m.out, `\n`...)
		return
	case '\r':
		m.out = append(m.out, `\r`...)
		return
	case '\t':
		m.out = append(m.out, `\t`...)
		return
	case '\b':
		m.out = append(m.out, `\b`...)
		return
	case '\f':
		m.out = append(m.out, `\f`...)
		return
	}
	switch {
	case r < 0x20:
		m.out = appendU4(m.out, r)
	case r < 0x7f:
		m.out = append(m.out, byte(r))
	case r >= 0xD800 && r <= 0xDFFF:
		m.out = appendU4(m.out, r) // a lone surrogate has no UTF-8 form
	case !m.ascii:
		m.out = utf8.AppendRune(m.out, r)
	case r > 0xFFFF:
		r -= 0x10000
		m.out = appendU4(m.out, 0xD800+(r>>10))
		m.out = appendU4(m.out, 0xDC00+(r&0x3FF))
	default:
		m.out = appendU4(m.out, r)
	}
}

func appendU4(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&15], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
}

// flushToken writes the raw text of a token an error cut short (a number, a literal, an
// escape), so that arguments that go on raw after the error lose nothing.
func (m *jsonMachine) flushToken() {
	if !m.emitting || m.raw {
		return
	}
	switch m.st {
	case jNum:
		m.out = append(m.out, m.num...)
	case jLit:
		m.out = append(m.out, m.lit[:m.litPos]...)
	case jStr, jStrEsc, jStrU:
		if m.strRole&strEmit == 0 {
			return
		}
		m.flushHi()
		m.flushUTF()
		switch m.st {
		case jStrEsc:
			m.out = append(m.out, '\\')
		case jStrU:
			m.out = append(m.out, '\\', 'u')
			for k := m.uN - 1; k >= 0; k-- {
				m.out = append(m.out, hexDigits[m.uVal>>(4*k)&15])
			}
		}
	}
}
