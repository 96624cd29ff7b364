//go:build race

package tokenizer

// raceEnabled shrinks the pathological-input tests, which are ~10x slower under the race detector.
const raceEnabled = true
