// Package tokenizer loads a Hugging Face tokenizer.json (plus tokenizer_config.json when present)
// and encodes text to token ids exactly as the Hugging Face `tokenizers` library does, so the
// gateway's block keys match the keys of the engine that serves the model.
//
// Supported today: byte-level BPE models (Qwen2/Qwen3, Llama 3, DeepSeek V3, GPT-2 style) with
// NFC/NFD/NFKC/NFKD normalizers, Split pre-tokenizers whose regex is one of the known model
// patterns (implemented by hand with Oniguruma's Unicode semantics, including the `\s+(?!\S)`
// lookahead), the ByteLevel pre-tokenizer, added/special tokens with their
// lstrip/rstrip/normalized/single_word flags, ignore_merges, the ByteLevel decoder, and the
// TemplateProcessing/ByteLevel/Sequence post-processors. Anything else is rejected by LoadFile
// with an error wrapping ErrUnsupported rather than tokenized approximately.
//
// Which call to use:
//   - Encode(dst, text, false) is the raw encode (no special tokens added), what the gateway routes
//     on for chat prompts that were already rendered with their special tokens.
//   - Encode(dst, text, true) adds special tokens with transformers semantics (tokenizer.json's
//     post-processor, overridden by add_bos_token/add_eos_token from tokenizer_config.json), which
//     is how vLLM tokenizes /v1/completions text prompts.
//   - Decode turns a whole id sequence back into text; StreamDecoder does it incrementally for
//     streamed responses and never emits a broken UTF-8 sequence.
//
// A *Tokenizer is immutable after loading and safe for concurrent use; its word cache is
// lock-free (a direct-mapped table of atomic pointers).
package tokenizer
