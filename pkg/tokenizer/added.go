package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         uint32
	content    string
	special    bool
	lstrip     bool
	rstrip     bool
	normalized bool
	singleWord bool
}

// trie finds added tokens in text with aho-corasick's LeftmostLongest semantics (what tokenizers
// uses): the match that starts first, and the longest one among those starting there.
// Read-only after construction.
type trie struct {
	nodes []trieNode
	first [256]bool // bytes that start some token: a cheap filter for the scan
	// firstCount is how many bytes start some token, and onlyFirst that byte when it is one
	// ('<' for most models): the scan then jumps between its occurrences with IndexByte.
	firstCount int
	onlyFirst  byte
}

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into Tokenizer.added, or -1
}

type trieEdge struct {
	b    byte
	node int32
}

func newTrie() *trie { return &trie{nodes: []trieNode{{tok: -1}}} }

func (t *trie) empty() bool { return len(t.nodes) == 1 }

func (t *trie) insert(s string, tok int32) {
	if s == "" {
		return
	}
	if !t.first[s[0]] {
		t.first[s[0]] = true
		t.firstCount++
		t.onlyFirst = s[0]
	}
	n := int32(0)
	for i := 0; i < len(s); i++ {
		child := int32(-1)
		for _, e := range t.nodes[n].edges {
			if e.b == s[i] {
				child = e.node
				break
			}
		}
		if child < 0 {
			child = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{tok: -1})
			t.nodes[n].edges = append(t.nodes[n].edges, trieEdge{b: s[i], node: child})
		}
		n = child
	}
	if t.nodes[n].tok < 0 { // the first of duplicate contents wins
		t.nodes[n].tok = tok
	}
}

// longestAt returns the longest token starting at s[i] and its end, or tok -1.
func (t *trie) longestAt(s string, i int) (tok int32, end int) {
	tok, n := -1, int32(0)
	for j := i; j < len(s); j++ {
		child := int32(-1)
		for _, e := range t.nodes[n].edges {
			if e.b == s[j] {
				child = e.node
				break
			}
		}
		if child < 0 {
			break
		}
		n = child
		if k := t.nodes[n].tok; k >= 0 {
			tok, end = k, j+1
		}
	}
	return tok, end
}

// find returns the leftmost-longest match at or after from.
func (t *trie) find(s string, from int) (tok int32, start, end int) {
	if t.firstCount == 1 {
		for i := from; i < len(s); i++ {
			j := strings.IndexByte(s[i:], t.onlyFirst)
			if j < 0 {
				break
			}
			i += j
			if k, e := t.longestAt(s, i); k >= 0 {
				return k, i, e
			}
		}
		return -1, 0, 0
	}
	for i := from; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		if k, e := t.longestAt(s, i); k >= 0 {
			return k, i, e
		}
	}
	return -1, 0, 0
}

// isWordRune is a rune matched by `\w` in Rust's regex crate, which tokenizers uses for
// single_word boundaries: Alphabetic (letters, letter numbers such as Ⅻ, Other_Alphabetic),
// marks, decimal digits, connector punctuation, join controls.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.In(r, unicode.Nd, unicode.Nl, unicode.Pc) ||
		r == 0x200C || r == 0x200D || unicode.Is(unicode.Other_Alphabetic, r)
}

// splitAdded calls emit for each piece of s in order: (token index, "") for an added token, or
// (-1, text) for the text between tokens (possibly empty pieces are skipped). It applies the
// lstrip/rstrip/single_word rules of tokenizers' AddedVocabulary::find_matches.
func (tk *Tokenizer) splitAdded(tr *trie, s string, emit func(tok int32, text string)) {
	startOffset := 0
	pos := 0
	for pos < len(s) {
		k, start, stop := tr.find(s, pos)
		if k < 0 {
			break
		}
		pos = stop
		at := &tk.added[k]
		if at.singleWord {
			startOK := start == 0
			if !startOK {
				r, _ := utf8.DecodeLastRuneInString(s[:start])
				startOK = !isWordRune(r)
			}
			stopOK := stop == len(s)
			if !stopOK {
				r, _ := utf8.DecodeRuneInString(s[stop:])
				stopOK = !isWordRune(r)
			}
			if !startOK || !stopOK {
				// The automaton resumes after the rejected match, as aho-corasick's find_iter does.
				continue
			}
		}
		if at.lstrip {
			ns := start
			for ns > startOffset {
				r, n := utf8.DecodeLastRuneInString(s[:ns])
				if !unicode.IsSpace(r) {
					break
				}
				ns -= n
			}
			start = ns
		}
		if at.rstrip {
			for stop < len(s) {
				r, n := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += n
			}
			pos = stop
		}
		if startOffset < start {
			emit(-1, s[startOffset:start])
		}
		emit(k, "")
		startOffset = stop
	}
	if startOffset < len(s) {
		emit(-1, s[startOffset:])
	}
}
