#!/usr/bin/env python3
"""Writes pkg/chat/testdata/qwen_vl_tokens.json: image placeholder token counts of Qwen2-VL,
Qwen2.5-VL and Qwen3-VL for image sizes, from the published formula of transformers'
Qwen2VLImageProcessor (src/transformers/models/qwen2_vl/image_processing_qwen2_vl.py,
smart_resize, current form: no "smaller than factor" check, max(factor, ...) when shrinking):

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

    python3 tools/multimodal/qwen_vl_tokens.py > pkg/chat/testdata/qwen_vl_tokens.json
"""
import json
import math


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


CONFIGS = [
    # Qwen2-VL / Qwen2.5-VL preprocessor_config.json
    {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 12845056},
    # vLLM docs' common override (max_pixels = 1280 * 28 * 28)
    {"patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 1003520},
    # Qwen3-VL (patch 16): size.shortest_edge / longest_edge
    {"patch_size": 16, "merge_size": 2, "min_pixels": 65536, "max_pixels": 16777216},
]
SIZES = [(1, 1), (8, 8), (24, 32), (28, 28), (42, 42), (70, 98), (224, 224), (250, 1000), (480, 640), (1080, 1920),
         (2000, 3000), (4096, 4096), (3, 1000), (1, 300), (14, 2800), (333, 777), (99, 1234)]

cases = []
for c in CONFIGS:
    f = c["patch_size"] * c["merge_size"]
    for h, w in SIZES:
        r = smart_resize(h, w, f, c["min_pixels"], c["max_pixels"])
        tokens = None if r is None else (r[0] // c["patch_size"]) * (r[1] // c["patch_size"]) // (c["merge_size"] ** 2)
        cases.append({**c, "height": h, "width": w, "tokens": tokens})
print(json.dumps(cases, indent=1))
