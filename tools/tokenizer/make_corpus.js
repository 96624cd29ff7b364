#!/usr/bin/env node
// Assembles pkg/tokenizer/testdata/bench_corpus.jsonl, the benchmark corpus shared by the Go
// benchmark (BenchmarkEncode) and bench.js: one JSON string per line, each a chunk of at most
// ~4 KB cut at paragraph boundaries, like the documents and prompts a gateway sees.
// Sources (all freely redistributable, found on any machine with Go and its module cache):
//   - The Go Programming Language Specification and The Go Memory Model
//     ($GOROOT/doc/*.html, CC BY 3.0, tags stripped): English prose with code examples;
//   - $GOROOT/src/net/http/server.go and $GOROOT/src/sort/sort.go (BSD-3-Clause): Go code;
//   - golang.org/x/text encoding test data (public domain): Candide (English), Rashomon
//     (Japanese), Sunzi Bingfa (Chinese), Unsu Joh-eun Nal (Korean);
//   - the prose and code paragraphs of corpus.js.
// Usage: node tools/tokenizer/make_corpus.js   (needs `go` on PATH)
'use strict';
const fs = require('fs');
const path = require('path');
const { execSync } = require('child_process');
const { prose, code } = require('./corpus');

const root = path.resolve(__dirname, '..', '..');
const goroot = execSync('go env GOROOT').toString().trim();
const modcache = execSync('go env GOMODCACHE').toString().trim();
const xtext = execSync('go list -m -f "{{.Dir}}" golang.org/x/text', { cwd: root }).toString().trim() ||
  path.join(modcache, 'golang.org/x/text@v0.44.0');

function stripHTML(s) {
  return s.replace(/<script[\s\S]*?<\/script>/g, '').replace(/<[^>]+>/g, '')
    .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&')
    .replace(/\n{3,}/g, '\n\n');
}

const docs = [
  stripHTML(fs.readFileSync(path.join(goroot, 'doc', 'go_spec.html'), 'utf8')),
  stripHTML(fs.readFileSync(path.join(goroot, 'doc', 'go_mem.html'), 'utf8')),
  fs.readFileSync(path.join(goroot, 'src', 'net', 'http', 'server.go'), 'utf8'),
  fs.readFileSync(path.join(goroot, 'src', 'sort', 'sort.go'), 'utf8'),
  ...['candide-utf-8.txt', 'rashomon-utf-8.txt', 'sunzi-bingfa-simplified-utf-8.txt', 'unsu-joh-eun-nal-utf-8.txt']
    .map((f) => fs.readFileSync(path.join(xtext, 'encoding', 'testdata', f), 'utf8')),
  prose.join('\n\n'),
  code.join('\n\n'),
];

const chunks = [];
for (const doc of docs) {
  let cur = '';
  for (const para of doc.split(/(?<=\n\n)/)) {
    if (cur.length > 0 && cur.length + para.length > 4096) {
      chunks.push(cur);
      cur = '';
    }
    cur += para;
  }
  if (cur) chunks.push(cur);
}
const out = path.join(root, 'pkg', 'tokenizer', 'testdata', 'bench_corpus.jsonl');
fs.writeFileSync(out, chunks.map((c) => JSON.stringify(c)).join('\n') + '\n');
const bytes = chunks.reduce((n, c) => n + Buffer.byteLength(c), 0);
console.log(`${out}: ${chunks.length} chunks, ${bytes} bytes of text`);
