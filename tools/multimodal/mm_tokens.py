#!/usr/bin/env python3
"""Writes pkg/chat/testdata/mm_tokens.json, the placeholder counts and expansions of every image
family the gateway computes, from the published rules (not from the gateway's code):

"qwen_vl": image placeholder token counts of Qwen2-VL, Qwen2.5-VL and Qwen3-VL for image sizes,
from transformers' Qwen2VLImageProcessor (src/transformers/models/qwen2_vl/
image_processing_qwen2_vl.py, smart_resize, current form: no "smaller than factor" check,
max(factor, ...) when shrinking):

    h_bar = round(h / F) * F; w_bar = round(w / F) * F          (F = patch_size * merge_size)
    if h_bar * w_bar > max_pixels:
        beta = sqrt(h * w / max_pixels)
        h_bar = max(F, floor(h / beta / F) * F); w_bar = max(F, floor(w / beta / F) * F)
    elif h_bar * w_bar < min_pixels:
        beta = sqrt(min_pixels / (h * w))
        h_bar = ceil(h * beta / F) * F; w_bar = ceil(w * beta / F) * F
    tokens = (h_bar / patch_size) * (w_bar / patch_size) / merge_size**2

(the processor's image_grid_thw is [1, h_bar/patch, w_bar/patch], and the model's processor
replaces one <|image_pad|> by grid.prod() // merge_size**2 tokens). Python's round() rounds
half to even. An aspect ratio above 200 is an error (count: null).

"gemma3": chat requests with images rendered with Gemma 3's chat template (Jinja2, set up as
tools/chat/gen.py sets it up), tokenized by the reference Hugging Face tokenizers
(tools/chat/ids.js), then expanded as vLLM expands them on token ids
(vllm/model_executor/models/gemma3_mm.py, Gemma3MultiModalProcessor):
  - each <start_of_image> becomes the ids of the processor's full_image_sequence,
    "\\n\\n" + <start_of_image> + <image_soft_token> * image_seq_length + <end_of_image> + "\\n\\n"
    (transformers src/transformers/models/gemma3/processing_gemma3.py, image_seq_length 256,
    pan and scan off), encoded without special tokens (vLLM's _seq2tokens);
  - _apply_token_matches then runs over the whole prompt replace_token_matches(["\\n", "\\n\\n"] →
    "\\n\\n\\n"), (["\\n\\n", "\\n"] → "\\n\\n\\n"), (["\\n\\n", "\\n\\n"] → "\\n\\n\\n\\n"), each left
    to right without overlaps;
  - _find_mm_placeholders splits every "\\n\\n\\n" into ["\\n", "\\n\\n"] and "\\n\\n\\n\\n" into
    ["\\n\\n", "\\n\\n"], searches the image sequence left to right (processing/processor.py
    _iter_placeholders) and maps each match's start back to the merged token: the item's
    PlaceholderRange is (that offset, len(full_image_sequence ids)).
Each case records the expanded ids, the ranges, and whether the reference tokenizer gives the
same ids for the expanded text (what the processor's own tokenization, vLLM's path without its
processor cache, would give).

    python3 tools/multimodal/mm_tokens.py > pkg/chat/testdata/mm_tokens.json

Needs `make testdata` (the Gemma 3 tokenizer and the reference tokenizers) and Node.
"""
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "chat"))
import gen  # noqa: E402  (the reference renderer's Jinja2 environment and reference ids)


def smart_resize(h, w, factor, min_pixels, max_pixels):
    if max(h, w) / min(h, w) > 200:
        return None
    h_bar = round(h / factor) * factor
    w_bar = round(w / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        h_bar = max(factor, math.floor(h / beta / factor) * factor)
        w_bar = max(factor, math.floor(w / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / factor) * factor
        w_bar = math.ceil(w * beta / factor) * factor
    return h_bar, w_bar


QWEN_CONFIGS = [
    # Qwen2-VL / Qwen2.5-VL preprocessor_config.json
    {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056},
    # vLLM docs' common override (max_pixels = 1280 * 28 * 28)
    {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 1003520},
    # Qwen3-VL (patch 16): size.shortest_edge / longest_edge
    {"patch_size": 16, "merge_size": 2, "min_pixels": 65536, "max_pixels": 16777216},
]
QWEN_SIZES = [(1, 1), (8, 8), (24, 32), (28, 28), (42, 42), (70, 98), (224, 224), (250, 1000), (480, 640), (1080, 1920),
              (2000, 3000), (4096, 4096), (3, 1000), (1, 300), (14, 2800), (333, 777), (99, 1234)]


def qwen_cases():
    cases = []
    for c in QWEN_CONFIGS:
        f = c["patch_size"] * c["merge_size"]
        for h, w in QWEN_SIZES:
            r = smart_resize(h, w, f, c["min_pixels"], c["max_pixels"])
            tokens = None if r is None else (r[0] // c["patch_size"]) * (r[1] // c["patch_size"]) // (c["merge_size"] ** 2)
            cases.append({**c, "height": h, "width": w, "tokens": tokens})
    return cases


# ---------------------------------------------------------------- Gemma 3

IMAGE_SEQ_LENGTH = 256
BOI, EOI, IMAGE = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
FULL_IMAGE_SEQUENCE = "\n\n" + BOI + IMAGE * IMAGE_SEQ_LENGTH + EOI + "\n\n"


def img(uuid):
    return {"type": "image_url", "image_url": {"url": "https://example.com/" + uuid + ".png"}, "uuid": uuid}


def text(t):
    return {"type": "text", "text": t}


GEMMA_REQUESTS = [
    ("one image after text", [{"role": "user", "content": [text("What is in this picture?"), img("a")]}]),
    ("image first: the turn's newline merges", [{"role": "user", "content": [img("a"), text("Describe it.")]}]),
    ("system prefix then image: \\n\\n\\n\\n", [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": [img("a"), text("Describe it.")]}]),
    ("two adjacent images overlap", [{"role": "user", "content": [text("Compare"), img("a"), img("b"), text("please.")]}]),
    ("three adjacent images after the turn", [{"role": "user", "content": [img("a"), img("b"), img("c")]}]),
    ("two turns", [{"role": "user", "content": [img("a"), text("What is this?")]},
                   {"role": "assistant", "content": "A cat on a mat."},
                   {"role": "user", "content": [text("And this one?"), img("b")]}]),
]


def convert(messages):
    """vLLM's openai content format: a media part reaches the template as {"type": "image"}."""
    out = []
    for m in messages:
        c = m["content"]
        if isinstance(c, list):
            c = [{"type": "image"} if p["type"] == "image_url" else {"type": "text", "text": p["text"]} for p in c]
        out.append({"role": m["role"], "content": c})
    return out


def replace_token_matches(ids, match, new):
    out, i = [], 0
    while i < len(ids):
        if ids[i:i + len(match)] == match:
            out.extend(new)
            i += len(match)
        else:
            out.append(ids[i])
            i += 1
    return out


def gemma_cases():
    with open(os.path.join(ROOT, ".cache", "tokenizers", "gemma3", "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    template = gen.compile_template(cfg["chat_template"])
    assert gen.detect_content_format(cfg["chat_template"]) == "openai"
    special = gen.special_tokens(cfg)
    prompts = [template.render(messages=convert(msgs), add_generation_prompt=True, **special) for _, msgs in GEMMA_REQUESTS]
    nl_texts = ["\n", "\n\n", "\n\n\n", "\n\n\n\n"]
    ref = gen.token_ids("gemma3", prompts + [FULL_IMAGE_SEQUENCE, BOI] + nl_texts)
    prompt_ids, seq, (boi,), nls = ref[:len(prompts)], ref[len(prompts)], ref[len(prompts) + 1], ref[len(prompts) + 2:]
    assert all(len(x) == 1 for x in nls), nls
    nl1, nl2, nl3, nl4 = (x[0] for x in nls)
    expanded_texts = [p.replace(BOI, FULL_IMAGE_SEQUENCE) for p in prompts]
    text_ids = gen.token_ids("gemma3", expanded_texts)
    cases = []
    for (name, msgs), prompt, ids, tids in zip(GEMMA_REQUESTS, prompts, prompt_ids, text_ids):
        n = sum(1 for m in msgs if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url")
        assert ids.count(boi) == n
        out = []
        for t in ids:
            out.extend(seq if t == boi else [t])
        out = replace_token_matches(out, [nl1, nl2], [nl3])
        out = replace_token_matches(out, [nl2, nl1], [nl3])
        out = replace_token_matches(out, [nl2, nl2], [nl4])
        split, orig = [], []
        for i, t in enumerate(out):
            parts = [nl1, nl2] if t == nl3 else [nl2, nl2] if t == nl4 else [t]
            split.extend(parts)
            orig.extend([i] * len(parts))
        spans, i = [], 0
        while i < len(split) and len(spans) < n:
            if split[i:i + len(seq)] == seq:
                spans.append([orig[i], len(seq)])
                i += len(seq)
            else:
                i += 1
        assert len(spans) == n, name
        cases.append({"name": name, "messages": msgs, "prompt": prompt, "ids": out, "spans": spans,
                      "tokenizer_agrees": tids == out})
    return {"image_seq_length": IMAGE_SEQ_LENGTH, "sequence": seq, "cases": cases}


def main():
    out = {"qwen_vl": qwen_cases(), "gemma3": gemma_cases()}
    # One case a line: the ids make the file long, not wide, to review.
    lines = ["{", ' "qwen_vl": [']
    lines.append(",\n".join("  " + json.dumps(c) for c in out["qwen_vl"]))
    g = out["gemma3"]
    lines.append(' ],\n "gemma3": {"image_seq_length": %d, "sequence": %s, "cases": [' % (g["image_seq_length"], json.dumps(g["sequence"])))
    lines.append(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in g["cases"]))
    lines.append(" ]}\n}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
