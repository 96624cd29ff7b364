// Package tokenizer loads a Hugging Face tokenizer.json (plus tokenizer_config.json when present)
// and encodes text to token ids exactly as the Hugging Face `tokenizers` library does, so the
// gateway's block keys match the keys of the engine that serves the model.
//
// Supported today, each checked id for id against the Hugging Face library on every committed
// golden case: byte-level BPE models (Qwen2/Qwen3, Llama 3/3.1, DeepSeek V3, gpt-oss, GPT-2
// style) and character-level "SentencePiece style" BPE with byte fallback (Llama 2, Gemma 3).
// That covers NFC/NFD/NFKC/NFKD, Prepend and literal Replace normalizers; Split pre-tokenizers
// whose regex is one of the known model patterns (implemented by hand with Oniguruma's Unicode
// semantics, including the `\s+(?!\S)` lookahead and (?i) folding), literal Split patterns,
// and the ByteLevel pre-tokenizer; added/special tokens with their
// lstrip/rstrip/normalized/single_word flags; ignore_merges; byte fallback, unk and fuse_unk;
// the ByteLevel decoder and the Replace/ByteFallback/Fuse/Strip chain; and the
// TemplateProcessing/ByteLevel/Roberta/Bert/Sequence post-processors. Anything else (Unigram or
// WordPiece models, unknown regexes, other normalizers) is rejected by LoadFile with an error
// wrapping ErrUnsupported rather than tokenized approximately.
//
// Which call to use:
//   - LoadModel is what a command calls with its flags (a model directory, or a tokenizer.json
//     file, or neither); LoadDir and LoadFile when the caller knows which it has; Load for the
//     files' contents already in memory.
//   - Encode(dst, text, false) is the raw encode (no special tokens added), what the gateway routes
//     on for chat prompts that were already rendered with their special tokens.
//   - Encode(dst, text, true) adds special tokens with transformers semantics (tokenizer.json's
//     post-processor, overridden by add_bos_token/add_eos_token from tokenizer_config.json), which
//     is how vLLM tokenizes /v1/completions text prompts.
//   - Decode turns a whole id sequence back into text; StreamDecoder does it incrementally for
//     streamed responses and never emits a broken UTF-8 sequence.
//
// A *Tokenizer is immutable after loading and safe for concurrent use; its word cache (256K
// entries, about 2 MB of slots) is a lock-free 4-way set-associative table of atomic pointers, and
// per-call scratch space comes from a sync.Pool, so Encode takes no lock and, with a warm cache
// and a dst with room, allocates nothing.
//
// Input rules: Encode rejects text that is not valid UTF-8 with ErrInvalidUTF8 (JSON decoding has
// already turned invalid bytes into U+FFFD for gateway requests); NUL and every other code point
// are ordinary text. Work and memory are linear in the input (the BPE of a single 10 MB word
// uses a heap, not the quadratic scan).
//
// Exactness is tested against the Hugging Face library: testdata/golden_<family>.jsonl (made by
// tools/tokenizer/golden.js from a hard corpus) and a digest of the whole benchmark corpus
// (tools/tokenizer/bench.js --digest). `make testdata` fetches the tokenizers.
package tokenizer
