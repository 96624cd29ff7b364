#!/usr/bin/env node
// Regenerates pkg/tokenizer/testdata/golden_<family>.jsonl: one JSON object per line with
//   text         the input
//   ids          encode(text, {addSpecialTokens: false})   (raw encode)
//   ids_special  encode(text, {addSpecialTokens: true})    (tokenizer.json post-processor only)
//   decoded      decode(ids, false)
// computed by the Hugging Face `tokenizers` Rust library (0.22.x) through its Node binding
// @anush008/tokenizers. Run `make testdata` first (fetches the tokenizers and the binding), then
//   node tools/tokenizer/golden.js
'use strict';
const fs = require('fs');
const path = require('path');
const { fixed, prose, code, randomTexts } = require('./corpus');

const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, '.cache', 'node', 'node_modules', '@anush008', 'tokenizers'));
const families = ['qwen3', 'llama3', 'llama3_1', 'deepseek_v3', 'gptoss', 'llama2', 'gemma3', 'gpt2style', 'addedflags'];

// Options (for ad-hoc differential runs; the committed files use the defaults):
//   --out DIR     write golden_<family>.jsonl there instead of pkg/tokenizer/testdata
//   --random N    number of random texts (default 400)
//   --seed S      PRNG seed of the random texts (default 1337); with a seed other than the
//                 default only random texts are written
function option(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}

async function main() {
  const outDir = option('--out', path.join(root, 'pkg', 'tokenizer', 'testdata'));
  const seed = Number(option('--seed', '1337'));
  const random = randomTexts(Number(option('--random', '400')), seed);
  const texts = seed === 1337 ? [...fixed, ...prose, ...code, prose.join('\n\n'), code.join('\n'), ...random] : random;
  for (const fam of families) {
    const tok = Tokenizer.fromFile(path.join(root, '.cache', 'tokenizers', fam, 'tokenizer.json'));
    const lines = [];
    for (const text of texts) {
      const a = await tok.encode(text, null, { addSpecialTokens: false });
      const b = await tok.encode(text, null, { addSpecialTokens: true });
      const ids = a.getIds();
      const decoded = await tok.decode(ids, false);
      lines.push(JSON.stringify({ text, ids, ids_special: b.getIds(), decoded }));
    }
    const out = path.join(outDir, `golden_${fam}.jsonl`);
    fs.writeFileSync(out, lines.join('\n') + '\n');
    console.log(`${out}: ${lines.length} pairs, ${fs.statSync(out).size} bytes`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
