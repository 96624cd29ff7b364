#!/usr/bin/env node
// Times the Hugging Face `tokenizers` Rust library (0.22.x, through its Node binding
// @anush008/tokenizers) encoding pkg/tokenizer/testdata/bench_corpus.jsonl, single-threaded,
// for comparison with `go test -bench Encode ./pkg/tokenizer` on the same text and machine.
//
//   node tools/tokenizer/bench.js [--runs N] [--families qwen3,llama3] [--ids-out DIR]
//
// Three modes, all timing encoding only:
//   batch     one encodeBatch(chunks) call per run with TOKENIZERS_PARALLELISM=false, so Rust
//             encodes the chunks one after another on one thread (the fairest comparison),
//             after a warm-up pass (the BPE cache holds the corpus' words, as in a running
//             server; compare with go test -bench 'Encode$');
//   cold      the same call on a tokenizer loaded (untimed) just before it, whose BPE cache is
//             empty: text the cache has not seen (compare with -bench EncodeCold);
//   per-call  await encode(chunk) for each chunk in turn (adds the binding's per-call cost:
//             a libuv task and a Promise per chunk).
// The result is the median of N runs (default 7). --ids-out writes the ids of every chunk as
// JSON lines (ids_<family>.jsonl) for an exact comparison with the Go encoder. --digest
// rewrites pkg/tokenizer/testdata/bench_corpus_digest.json: per family, the token count and an
// FNV-1a 64 hash of all ids (as little-endian u32, chunk after chunk), which TestBenchCorpusDigest
// checks so the whole benchmark corpus is an exactness test too.
'use strict';
process.env.TOKENIZERS_PARALLELISM = 'false';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, '.cache', 'node', 'node_modules', '@anush008', 'tokenizers'));

function option(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
function fnv(encodings) {
  const mask = (1n << 64n) - 1n;
  let h = 0xcbf29ce484222325n;
  for (const e of encodings) {
    for (const id of e.getIds()) {
      for (let k = 0; k < 4; k++) {
        h ^= BigInt((id >>> (8 * k)) & 0xff);
        h = (h * 0x100000001b3n) & mask;
      }
    }
  }
  return h;
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const runs = Number(option('--runs', '7'));
  const idsOut = option('--ids-out', '');
  const chunks = fs.readFileSync(path.join(root, 'pkg', 'tokenizer', 'testdata', 'bench_corpus.jsonl'), 'utf8')
    .split('\n').filter((l) => l).map((l) => JSON.parse(l));
  const bytes = chunks.reduce((n, c) => n + Buffer.byteLength(c), 0);
  const digest = {};
  const all = ['qwen3', 'llama3', 'llama3_1', 'deepseek_v3', 'gptoss', 'llama2', 'gemma3', 'gpt2style', 'addedflags'];
  const fams = option('--families', '') ? option('--families', '').split(',') : all;
  for (const fam of fams) {
    const file = path.join(root, '.cache', 'tokenizers', fam, 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const warm = await tok.encodeBatch(chunks, { addSpecialTokens: false });
    const tokens = warm.reduce((n, e) => n + e.getLength(), 0);
    digest[fam] = { tokens, fnv1a64: fnv(warm).toString() };
    if (idsOut) {
      fs.writeFileSync(path.join(idsOut, `ids_${fam}.jsonl`), warm.map((e) => JSON.stringify(e.getIds())).join('\n') + '\n');
    }
    const batch = [], perCall = [], cold = [];
    let cpu = 0;
    for (let r = 0; r < runs; r++) {
      const fresh = Tokenizer.fromFile(file);
      const t1 = process.hrtime.bigint();
      await fresh.encodeBatch(chunks, { addSpecialTokens: false });
      cold.push(Number(process.hrtime.bigint() - t1) / 1e9);
      const c0 = process.cpuUsage();
      let t0 = process.hrtime.bigint();
      await tok.encodeBatch(chunks, { addSpecialTokens: false });
      batch.push(Number(process.hrtime.bigint() - t0) / 1e9);
      const c = process.cpuUsage(c0);
      cpu += (c.user + c.system) / 1e6;
      t0 = process.hrtime.bigint();
      for (const ch of chunks) await tok.encode(ch, null, { addSpecialTokens: false });
      perCall.push(Number(process.hrtime.bigint() - t0) / 1e9);
    }
    for (const [mode, times] of [['batch', batch], ['cold', cold], ['per-call', perCall]]) {
      const s = median(times);
      console.log(`${fam}\t${mode}\t${chunks.length} chunks\t${bytes} B\t${tokens} tokens\t` +
        `${(s * 1e3).toFixed(1)} ms\t${(tokens / s / 1e6).toFixed(2)} Mtok/s\t${(bytes / s / 1e6).toFixed(2)} MB/s\t` +
        `${(s / tokens * 1e9).toFixed(0)} µs/1000 tok`);
    }
    console.log(`${fam}\tbatch CPU/wall ${(cpu / batch.reduce((a, b) => a + b, 0)).toFixed(2)} (1.00 = one busy thread; ` +
      `less means the machine was contended)\tbatch by CPU time: ${(tokens / (cpu / runs) / 1e6).toFixed(2)} Mtok/s`);
  }
  if (process.argv.includes('--digest')) {
    const out = path.join(root, 'pkg', 'tokenizer', 'testdata', 'bench_corpus_digest.json');
    fs.writeFileSync(out, JSON.stringify(digest, null, 1) + '\n');
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
