#!/usr/bin/env node
// Reads JSON strings (one per line) on stdin and prints, per line, the token ids of each as
// the Hugging Face `tokenizers` library encodes it without adding special tokens (what vLLM
// does with a rendered chat prompt). Usage: node tools/chat/ids.js FAMILY, FAMILY naming
// .cache/tokenizers/FAMILY/tokenizer.json. Used by tools/chat/gen.py.
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const { Tokenizer } = require(path.join(root, '.cache', 'node', 'node_modules', '@anush008', 'tokenizers'));

async function main() {
  const tok = Tokenizer.fromFile(path.join(root, '.cache', 'tokenizers', process.argv[2], 'tokenizer.json'));
  const lines = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l !== '');
  const out = [];
  for (const l of lines) {
    const enc = await tok.encode(JSON.parse(l), null, { addSpecialTokens: false });
    out.push(JSON.stringify(Array.from(enc.getIds())));
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
}
main().catch((e) => { console.error(e); process.exit(1); });
