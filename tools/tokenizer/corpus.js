// Hard corpus for the tokenizer golden files (see golden.js). Deterministic: the random part uses
// a fixed-seed PRNG, so regenerating gives the same texts.
'use strict';

const fixed = [
  '',
  ' ',
  'a',
  'Hello, world!',
  "Hello world's 12345 ſ 'ſ 'S 'T 'LL 'Re 'VE 'M 'D it's I'M they'LL we'Ve",
  "don't won't can't shouldn't y'all 'tis rock'n'roll ''s '''",
  'The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!',
  '  leading spaces', 'trailing spaces   ', '   ', '\t', '\n', '\r\n', '\n\n\n', '\r\r\n\n',
  'a\r\nb\rc\nd\r\n\r\ne', 'line1\n  line2\n\tline3\r\n   \n  x',
  'tabs\t\tand\t \tspaces \t\n mixed \u000b vertical \f feed',
  'nbsp\u00a0here\u00a0\u00a0twice \u00a0 mixed', 'ideographic\u3000space\u3000\u3000x',
  'line\u2028sep\u2029para\u0085nel', 'ogham\u1680space en\u2002em\u2003thin\u2009hair\u200anarrow\u202fmath\u205fend',
  'zero\u200bwidth\u200cnon\u200djoiner\ufeffbom',
  '1', '12', '123', '1234', '12345678901234567890', '3.14159 2.71828 -42 +7 1e10 0x1F 1_000_000',
  'Call 555-1234 or +1 (800) 555-0199. Price: $1,234.56 (€99,99) ¥1000 ₹500',
  'Unicode digits: ١٢٣٤٥ ۱۲۳ १२३४ ๑๒๓ ①②③ ⅠⅡⅢ ½¾ ²³ 𝟘𝟙𝟚',
  '你好，世界！这是一个测试。我们今天去北京。',
  '日本語のテキストです。カタカナとひらがなと漢字。ｶﾀｶﾅ',
  '한국어 텍스트입니다. 안녕하세요!',
  'مرحبا بالعالم! هذا اختبار للنص العربي. ١٢٣',
  'שלום עולם, זה מבחן.',
  'नमस्ते दुनिया! यह एक परीक्षण है। क्षत्रिय',
  'Привет, мир! Это тест. ЁЖИК ёжик',
  'Γειά σου Κόσμε! Ελληνικά ΣΊΣΥΦΟΣ',
  'ภาษาไทยไม่มีช่องว่าง สวัสดีครับ',
  'Tiếng Việt có dấu: Xin chào thế giới, Đường phố',
  'emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇩🇪 ✨🔥💯',
  '👨‍💻 coding, 🧑🏿‍🚀 space, 1️⃣ keycap #️⃣',
  'combining: e\u0301 a\u0300 n\u0303 o\u0308\u0304 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354\u036b\u0357\u0362L\u0320\u0368\u0367\u0369\u0358G\u0334\u033b\u0348\u034d\u0354\u0339\u0311\u0357\u030e\u0305\u035b\u0301O',
  'precomposed é vs decomposed e\u0301; Å vs A\u030a vs \u212b (angstrom); ﬁ ligature; Ω \u2126',
  '\u0301leading combining mark',
  'Hangul jamo: \u1100\u1161\u11a8 vs 각',
  'private use: \ue000\ue001\uf8ff \u{f0000} \u{10fffd}',
  'replacement \ufffd char \ufffd\ufffd, noncharacters \ufdd0 \uffff',
  'control \u0001\u0002\u001f\u007f \u0080\u009f chars',
  'nul\u0000byte\u0000\u0000end',
  'math 𝓗𝓮𝓵𝓵𝓸 𝕎𝕠𝕣𝕝𝕕 ∀x∈ℝ: x²≥0 ∑∫∂√∞ ≠ ≤ ≥',
  'arrows ←↑→↓ ⇒ ⇔ box ┌─┐│└┘ blocks ▀▄█ ░▒▓',
  'punctuation!!! ??? ... --- ___ *** ### @@@ ~~~ ``` \'\'\' """ ;;; ::: ,,, ...!?!?',
  '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!',
  '=====================================================================',
  'quotes “curly” ‘single’ «guillemets» „German“ 「Japanese」 『double』 — en–dash … ellipsis',
  'http://example.com/path?query=1&b=2#frag https://ünicode.example/ä?q=ö user@example.org',
  'C:\\Users\\name\\file.txt /usr/local/bin/go ~/.config/app.yaml',
  'def foo(x, y=2):\n    """Docstring."""\n    return x ** y  # comment\n\nclass Bar(object):\n\tpass\n',
  'func main() {\n\tfmt.Println("hello")\n\tfor i := 0; i < 10; i++ {\n\t\tx[i] = i*2\n\t}\n}\n',
  '#include <stdio.h>\nint main(void){printf("%d\\n",42);return 0;}',
  '<div class="x"><p>HTML &amp; entities &lt;tag&gt; &#x27;</p></div>',
  '{"key": "value", "n": [1, 2, 3], "nested": {"a": null, "b": true}}',
  'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
  '    indented code\n        more\n            deeper\n',
  'camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case-id __dunder__ $jq @decorator',
  'a'.repeat(1000),
  'ab'.repeat(700),
  'Supercalifragilisticexpialidocious'.repeat(30),
  '😀'.repeat(200),
  '你'.repeat(300),
  ' '.repeat(100) + 'x' + ' '.repeat(100),
  '\n'.repeat(50) + 'y' + '\r\n'.repeat(40),
  ' \n \n  \n\t\n' + '\u00a0\n'.repeat(10) + '\u3000 \r\n',
  '1234567890'.repeat(50),
  'x' + '\t'.repeat(30) + 'y',
  'special <|endoftext|> inside <|im_start|>user\nhi<|im_end|> and <think>reason</think> done',
  '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>',
  '<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>',
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city":"Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
  '<|endoftext|><|endoftext|>x<|endoftext|>',
  'almost special <|endoftext| and <|im_start and <|endoftext|x <｜User',
  ' <|im_end|> spaced  <|im_end|>  ',
  '<|reserved_special_token_5|><|finetune_right_pad_id|><|eom_id|><|python_tag|>',
  'mixed 中文English混合text日本語カタカナ123漢字456',
  'deepseek splits: 中文123中文 abc123def ひらがな漢字カタカナ',
  '.Hello ,World !foo ?Bar #tag @user $var %mod ^up &and *star (paren) [brack] {brace} |pipe ~tilde `tick`',
  "won't_stop 'quoted' \"dq\" it’s curly’s",
  'Ünïcödé Çàsé ÀÉÎÕÜ ß ẞ ǅ ǈ ǋ ﬀ ﬃ İstanbul ı',
  'a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b\u030c',
  '\u200d\u200d\u200dzwj only\u200d',
  '\ud83d\ude00 surrogate pair written as escapes',
  'lone surrogate replaced: \ufffd and \ufffdabc',
  'The year 2024 had 366 days; 1,000,000 people; v1.2.3-beta+build.45',
  'HelloWorld camelCase XMLHttpRequest ABCdef getHTTPResponseCode ǄǅǆDž ÀB́c ﬁne ʰʲ ˢuper',
  "path/to/file/ a//b ///x \\n\\r /\n// */ DON'T WE'LL You'Re they'D HE'S",
  "long s folds to s in (?i:'s): 龦'ſ'tion a'ſ'll x'ſtion 'ſa 'ſ's a'ſtring don'ſt 'ſſ 'Sſ ''ſ 'ﬅ 'ß 'K 'ſ\u0301",
  'flags: x <|im_end|>  y\t<|im_end|>\nz <|endoftext|>   w  </think> a<|im_start|>b <|im_start|> c',
  'single word after a letter number: Ⅻ<|im_start|> 中<|im_start|> _word word_ ١word',
  'normalized added tokens: café cafe\u0301 naïve nai\u0308ve <think> words word sword word_ word. 1word',
  'Σ̈a ÉCOLE école Éc\u0301ole MacDonald McDONALD iPhone eBay',
  '<|start|>system<|message|>You are ChatGPT.<|end|><|start|>assistant<|channel|>analysis<|message|>think<|return|>',
];

// Prose and code paragraphs used for both golden pairs and the benchmark corpus.
const prose = [
  'In the beginning of the nineteenth century, the small town was little more than a cluster of farms along the river. Merchants came twice a year, bringing cloth, salt and news from the capital; the children would run down to the landing to watch the boats arrive.',
  'Large language models are trained on trillions of tokens. A tokenizer converts text into those tokens, and the choice of vocabulary affects both the cost of inference and the quality of the model on languages other than English.',
  'The committee reviewed 42 proposals, approved 17, and deferred the rest until the next quarterly meeting, which is scheduled for March 3rd at 10:30 a.m. in Room 204.',
  'Il était une fois, dans un petit village de Provence, une boulangère qui se levait chaque matin à quatre heures pour préparer le pain. Ses croissants étaient célèbres jusqu’à Marseille.',
  'Der schnelle braune Fuchs springt über den faulen Hund. Straßenbahnhaltestelle und Donaudampfschifffahrtsgesellschaftskapitän sind lange Wörter.',
  'El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la biblioteca? ¡Qué día tan bonito!',
  '机器学习是人工智能的一个分支。它使计算机能够从数据中学习，而无需明确编程。近年来，深度学习取得了巨大的进步。',
  '東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。桜の季節には多くの観光客が訪れます。',
];
const code = [
  'package main\n\nimport (\n\t"fmt"\n\t"strings"\n)\n\n// Greet returns a greeting for name.\nfunc Greet(name string) string {\n\tif name == "" {\n\t\treturn "Hello, stranger!"\n\t}\n\treturn fmt.Sprintf("Hello, %s!", strings.TrimSpace(name))\n}\n',
  'import numpy as np\n\ndef softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:\n    x = x - x.max(axis=axis, keepdims=True)\n    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdims=True)\n\nif __name__ == "__main__":\n    print(softmax(np.array([1.0, 2.0, 3.0])))\n',
  'const express = require("express");\nconst app = express();\napp.get("/api/users/:id", async (req, res) => {\n  const user = await db.users.findOne({ id: req.params.id });\n  if (!user) return res.status(404).json({ error: "not found" });\n  res.json(user);\n});\napp.listen(3000);\n',
  'fn main() {\n    let v: Vec<u32> = (1..=10).map(|x| x * x).collect();\n    println!("{:?}", v);\n    match v.iter().sum::<u32>() {\n        0 => println!("empty"),\n        n if n > 100 => println!("big: {n}"),\n        _ => {}\n    }\n}\n',
  '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.log; do\n  grep -c "ERROR" "$f" || true\ndone | sort -n | tail -5\n',
];

// Deterministic random strings drawn from a pool of troublesome code points.
function mulberry32(a) {
  return function () {
    a |= 0; a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pool = [
  ' ', ' ', ' ', '  ', '\t', '\n', '\r', '\r\n', '\u00a0', '\u3000', '\u2028', '\u2029', '\u0085', '\u000b', '\u000c', '\u1680', '\u2003', '\u202f', '\u180e', '\u200b', '\u200d', '\ufeff',
  'a', 'b', 'Z', 'é', 'e\u0301', '\u0301', '\u0308', '\u093f', 'ß', 'ſ', 'İ', 'ǅ',
  "'", "'s", "'S", "'t", "'ll", "'LL", "'re", "'ve", "'m", "'d", "'ſ", '"',
  '0', '1', '7', '42', '123', '2024', '١', '٣', '०', '½', '²', '①', 'Ⅻ', '𝟙',
  '.', ',', '!', '?', ';', ':', '-', '_', '(', ')', '[', ']', '{', '}', '<', '>', '/', '\\', '|', '@', '#', '$', '%', '^', '&', '*', '+', '=', '~', '`',
  '。', '，', '、', '「', '」', '—', '…', '“', '”', '«', '»', '¿', '¡', '§', '¶', '©', '®', '™', '°', '±', '×', '÷', '€', '£', '¥', '₹', '←', '∑', '√', '∞',
  '中', '文', '字', '龥', '龦', '一', 'ぁ', 'ゟ', 'ア', 'ヿ', '゠', 'ｱ', '한', '각', '\u1100', 'ا', 'ل', 'ع', 'ب', '\u064b', 'क', '्', 'ष', 'ก', '\u0e31', 'Ж', 'Ω', 'λ', 'א',
  '😀', '👍', '🏽', '👨\u200d👩\u200d👧', '❤️', '\ufe0f', '🇫🇷', '✨', '🔥',
  '\ue000', '\u{f0000}', '\ufffd', '\ufdd0', '\u0000', '\u0001', '\u001f', '\u007f', '\u0080', '\u009f', '\u00ad', '\u2066', '\u202e',
  'the', ' the', 'The', 'hello', ' world', 'ing', 'tion', 'http', '://', 'www', '.com', 'func', 'return', ' if', 'x', 'y', 'self',
  'A', 'Q', 'Ǆ', 'ǅ', 'ʰ', 'ª', 'Éc', 'MacD', 'XML', 'Http', '/', '//', '<|start|>', '<|message|>',
  '<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<|begin_of_text|>', '<|eot_id|>', '<｜begin▁of▁sentence｜>', '<｜User｜>', '<｜tool▁sep｜>', '<|', '|>', '<｜', '｜>',
];
function randomTexts(n, seed) {
  const rnd = mulberry32(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rnd() * (i % 10 === 0 ? 120 : 30));
    let s = '';
    for (let j = 0; j < len; j++) s += pool[Math.floor(rnd() * pool.length)];
    out.push(s);
  }
  return out;
}

module.exports = { fixed, prose, code, randomTexts };
