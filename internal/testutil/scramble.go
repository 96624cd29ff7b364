package testutil

import (
	"math/rand/v2"
	"unicode"
)

// Scrambler returns a function that rewrites text with a random letter permutation drawn from
// rng: vowels among vowels, consonants among consonants, case kept, everything else unchanged.
// The result keeps the text's word structure and repetition (a word maps to the same word every
// time), stays pronounceable and tokenizes into about as many tokens as natural text of the same
// shape, yet a tokenizer's word cache has not seen it: benchmarks use it for the cold case.
func Scrambler(rng *rand.Rand) func(string) string {
	const vowels, consonants = "aeiou", "bcdfghjklmnpqrstvwxyz"
	var perm [26]byte
	for _, set := range []string{vowels, consonants} {
		for j, k := range rng.Perm(len(set)) {
			perm[set[j]-'a'] = set[k]
		}
	}
	return func(s string) string {
		rs := []rune(s)
		for j, r := range rs {
			switch {
			case r >= 'a' && r <= 'z':
				rs[j] = rune(perm[r-'a'])
			case r >= 'A' && r <= 'Z':
				rs[j] = unicode.ToUpper(rune(perm[r-'A']))
			}
		}
		return string(rs)
	}
}
