#!/usr/bin/python3
"""Render the probes with gen.py's Jinja2 environment; write probes.jsonl."""
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, "/work/main/tools/chat")
sys.path.insert(0, "/tmp/jinjaeval/probe")
import gen
from probes import P
with open("/tmp/jinjaeval/probe/probes.jsonl", "w", encoding="utf-8") as f:
    for name, tpl, vars in P:
        try:
            out = {"ok": gen.ENV.from_string(tpl).render(**vars)}
        except Exception as e:
            out = {"err": "%s: %s" % (type(e).__name__, e)}
        f.write(json.dumps({"name": name, "tpl": tpl, "vars": vars, **out}, ensure_ascii=False) + "\n")
print(len(P), "probes")
