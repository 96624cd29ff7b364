#!/usr/bin/python3
"""Reference renderer for pkg/chat's golden tests: vLLM's chat-request rules on top of Jinja2
set up exactly as Hugging Face transformers sets it up for apply_chat_template.

For every template of tools/chat/templates.json and every request of
pkg/chat/testdata/conversations.jsonl it writes one line of
pkg/chat/testdata/golden/<template>.jsonl:

  {"id", "format", "prompt", "ids"}                  the rendered prompt and its token ids
  {"id", "format", "error", "exact"}                 a request vLLM rejects with a 400;
                                                     exact: the Go side must give this message

and sweep.jsonl (the ollama-utils templates, prompts as hashes) and probes.jsonl (PROBES, small
templates on Python's string semantics, full prompts).

Token ids come from the reference Hugging Face tokenizers (tools/chat/ids.js, the
`tokenizers` Rust library through its Node build, as tools/tokenizer/golden.js uses it).

  /usr/bin/python3 tools/chat/gen.py            regenerate the golden files
  /usr/bin/python3 tools/chat/gen.py --check    exit 1 if a committed prompt or error differs
                                                (no Node needed: ids are not recomputed)

Needs Debian's python3-jinja2 (/usr/bin/python3) and, to regenerate, `make testdata`.
The rules implemented here are wire/vllm-chat.md §2-§8, written from vLLM's sources
(vllm/renderers/hf.py, entrypoints/chat_utils.py, chat_completion/protocol.py,
renderers/online_renderer.py) and transformers' chat_template_utils.py.
"""

import json
import os
import subprocess
import sys
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.path.join(ROOT, "pkg", "chat", "testdata")
# The clock of strftime_now in the golden renders (the Go test uses the same instant).
NOW = datetime(2026, 7, 26, 9, 5, 3)


# ---------------------------------------------------------------- §8 the environment

class GenerationBlock(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return NOW.strftime(fmt)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols])
ENV.filters["tojson"] = _tojson
ENV.globals["raise_exception"] = _raise_exception
ENV.globals["strftime_now"] = _strftime_now


@lru_cache(maxsize=64)
def compile_template(source):
    return ENV.from_string(source)


# ---------------------------------------------------------------- §4 content format (vllm/renderers/hf.py)

def _is_var_access(node, varname):
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == varname


def _is_attr_access(node, varname, key):
    if isinstance(node, nodes.Getitem):
        return _is_var_access(node.node, varname) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node, varname, key=None):
    if isinstance(node, nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _assign_var_or_elems(root, varname):
    yield root, varname
    related = [varname]
    while related:
        rv = related.pop(0)
        for a in root.find_all(nodes.Assign):
            if _is_var_or_elems_access(a.node, rv):
                assert isinstance(a.target, nodes.Name)
                yield a, a.target.name
                if a.target.name != rv:
                    related.append(a.target.name)


def _assign_messages_item(root):
    names = [v for _, v in _assign_var_or_elems(root, "messages")]
    for loop in root.find_all(nodes.For):
        for v in names:
            if _is_var_or_elems_access(loop.iter, v):
                assert isinstance(loop.target, nodes.Name)
                yield loop, loop.target.name
                break


def _assign_content_item(root):
    names = [v for _, v in _assign_messages_item(root)]
    for loop in root.find_all(nodes.For):
        for v in names:
            if _is_var_or_elems_access(loop.iter, v, "content"):
                assert isinstance(loop.target, nodes.Name)
                yield loop, loop.target.name
                break


@lru_cache(maxsize=256)
def detect_content_format(source):
    try:
        ast = ENV.parse(source)
    except Exception:
        return "string"
    try:
        next(_assign_content_item(ast))
    except StopIteration:
        return "string"
    except Exception:
        return "string"
    return "openai"


# ---------------------------------------------------------------- §2 request rules

class Rejected(Exception):
    def __init__(self, message, exact=True):
        super().__init__(message)
        self.exact = exact


def check_request(req):
    """The rules of chat_completion/protocol.py and online_renderer.render_chat that the
    test conversations exercise, with vLLM's messages."""
    if req.get("stream_options") and not req.get("stream"):
        raise Rejected("Stream options can only be defined when `stream=True`.")
    if req.get("tools") == []:
        raise Rejected("`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.")
    tc = req.get("tool_choice")
    if tc not in (None, "none") and req.get("tools") is None:
        raise Rejected("When using `tool_choice`, `tools` must be set.")
    if req.get("continue_final_message") and req.get("add_generation_prompt", True):
        raise Rejected("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    kw = req.get("chat_template_kwargs") or {}
    if req.get("chat_template") is not None or kw.get("chat_template") is not None:
        raise Rejected("Chat template is passed with request, but --trust-request-chat-template is not set. "
                       "Refused request with untrusted chat template.")


# ---------------------------------------------------------------- §3 messages

TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}


def parse_content(content, fmt, role):
    if content is None:
        parts = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    else:
        parts = content
    texts = []
    for p in parts:
        if isinstance(p, str):
            texts.append(p)
            continue
        key = TEXT_KEYS.get(p.get("type"))
        if key is None:
            # media parts need a multimodal model; the gateway renders text-only models
            raise Rejected("content part type %r needs a multimodal model" % p.get("type"), exact=False)
        if p.get(key) is None:
            continue
        texts.append(p[key])
    if fmt == "string":
        return "\n".join(t for t in texts if t != "")
    out = [{"type": "text", "text": t} for t in texts]
    if role == "tool":
        return "\n".join(t for t in texts)
    return out


def parse_arguments(args):
    if not isinstance(args, str):
        return args if isinstance(args, (dict, list)) else {}
    try:
        return json.loads(args)
    except ValueError:
        return {}


def convert_message(m, fmt):
    role = m["role"]
    out = {"role": role, "content": parse_content(m.get("content"), fmt, role)}
    reasoning = m.get("reasoning")
    if reasoning is None:
        reasoning = m.get("reasoning_content")
    if role == "assistant":
        if m.get("tool_calls") is not None:
            calls = []
            for c in m["tool_calls"]:
                f = c.get("function", {})
                calls.append({"id": c.get("id"), "function": {"arguments": parse_arguments(f.get("arguments")), "name": f.get("name")},
                              "type": c.get("type", "function")})
            if calls:
                out["tool_calls"] = calls
        if reasoning is not None:
            out["reasoning"] = reasoning
            out["reasoning_content"] = reasoning
    elif role == "tool":
        if m.get("tool_call_id") is not None:
            out["tool_call_id"] = m["tool_call_id"]
    elif role == "developer":
        out["tools"] = m.get("tools")
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


# ---------------------------------------------------------------- §5 tools, §7 kwargs

def convert_tool(t):
    f = t["function"]
    fn = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
    for k, v in f.items():
        if k not in fn:
            fn[k] = v
    return {"type": "function", "function": fn}


def merge_kwargs(defaults, overrides):
    return defaults | {k: v for k, v in overrides.items() if v not in (None, "auto")}


APPLY_PARAMS = {"conversation", "tools", "documents", "chat_template", "add_generation_prompt", "continue_final_message",
                "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
                "return_assistant_tokens_mask", "tokenizer_kwargs"}

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


@lru_cache(maxsize=256)
def undeclared_variables(source):
    return jinja2.meta.find_undeclared_variables(ENV.parse(source))


def render_request(source, special, req):
    """Returns the prompt text, or raises (Rejected for request rules, anything else for a
    template failure: vLLM answers every one with a 400 carrying str(exception))."""
    check_request(req)
    fmt = detect_content_format(source)
    tools = [convert_tool(t) for t in req["tools"]] if req.get("tools") is not None else None
    # build_chat_params + with_defaults: server defaults (tools) < request kwargs < top level
    extra = {"add_generation_prompt": req.get("add_generation_prompt", True),
             "continue_final_message": req.get("continue_final_message", False),
             "documents": req.get("documents"), "reasoning_effort": req.get("reasoning_effort")}
    user_kwargs = req.get("chat_template_kwargs") or {}
    if req.get("reasoning_effort") is not None and "enable_thinking" not in user_kwargs:
        extra["enable_thinking"] = req["reasoning_effort"] != "none"
    kwargs = merge_kwargs(merge_kwargs({}, {"tools": tools, "tokenize": False}), merge_kwargs(user_kwargs, extra))
    # resolve_chat_template_kwargs: keep template variables and apply_chat_template params
    undeclared = undeclared_variables(source)
    kept = {k: v for k, v in kwargs.items() if k in undeclared or k in APPLY_PARAMS}
    # apply_chat_template → render_jinja_template
    chat = [convert_message(m, fmt) for m in req["messages"]]
    tools_arg = kept.pop("tools", None)
    documents = kept.pop("documents", None)
    agp = kept.pop("add_generation_prompt", False)
    cfm = kept.pop("continue_final_message", False)
    for k in list(kept):
        if k in APPLY_PARAMS:
            del kept[k]
    template_kwargs = {**special, **kept}
    if tools_arg is not None:
        for t in tools_arg:
            if not isinstance(t, dict):
                raise ValueError("Tools should either be a JSON schema, or a callable function with type hints "
                                 "and a docstring suitable for auto-conversion to a schema.")
    if documents is not None:
        for d in documents:
            if not isinstance(d, dict):
                raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    final_message = None
    if cfm:
        final_message = chat[-1]["content"]
        if isinstance(final_message, (list, tuple)):
            for block in reversed(final_message):
                if "text" in block:
                    final_message = block["text"]
                    block["text"] = block["text"] + CONTINUE_TAG
                    break
            else:
                raise ValueError("continue_final_message is set but we could not find any text to continue in the final message!")
        else:
            chat[-1]["content"] = chat[-1]["content"] + CONTINUE_TAG
    rendered = compile_template(source).render(messages=chat, tools=tools_arg, documents=documents,
                                               add_generation_prompt=agp, **template_kwargs)
    if cfm:
        if final_message.strip() not in rendered or CONTINUE_TAG.strip() not in rendered:
            raise ValueError("continue_final_message is set but the final message does not appear in the chat after "
                             "applying the chat template! This can happen if the chat template deletes portions of the "
                             "final message. Please verify the chat template and final message in your chat to ensure "
                             "they are compatible.")
        loc = rendered.rindex(CONTINUE_TAG.strip())
        if rendered[loc:loc + len(CONTINUE_TAG)] == CONTINUE_TAG:
            rendered = rendered[:loc]
        else:
            rendered = rendered[:loc].rstrip()
    return fmt, rendered


# ---------------------------------------------------------------- templates

SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def _content(v):
    return v.get("content") if isinstance(v, dict) else v


def special_tokens(cfg):
    out = {}
    for k in SPECIAL_KEYS:
        v = _content(cfg.get(k))
        if v is not None:
            out[k] = v
    if cfg.get("additional_special_tokens") is not None:
        out["additional_special_tokens"] = [_content(x) for x in cfg["additional_special_tokens"] if _content(x) is not None]
    extra = cfg.get("extra_special_tokens")
    if isinstance(extra, dict):
        for k, v in extra.items():
            if _content(v) is not None:
                out[k] = _content(v)
    return out


def load_templates():
    with open(os.path.join(ROOT, "tools", "chat", "templates.json"), encoding="utf-8") as f:
        spec = json.load(f)
    out = []
    for t in spec["local"]:
        with open(os.path.join(ROOT, ".cache", "tokenizers", t["tokenizer"], "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        src = cfg["chat_template"]
        if isinstance(src, list):
            src = {x["name"]: x["template"] for x in src}["default"]
        out.append((t["name"], src, special_tokens(cfg), t["tokenizer"]))
    for t in spec["ollama"]:
        with open(os.path.join(ROOT, ".cache", "templates", t["name"] + ".jinja"), encoding="utf-8", newline="") as f:
            out.append((t["name"], f.read(), t["special_tokens"], t["tokenizer"]))
    return out


def token_ids(family, texts):
    """Reference ids of each text, from tools/chat/ids.js."""
    if not texts:
        return []
    proc = subprocess.run(["node", os.path.join(ROOT, "tools", "chat", "ids.js"), family],
                          input="".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts).encode("utf-8"),
                          capture_output=True, check=True)
    return [json.loads(l) for l in proc.stdout.decode("utf-8").splitlines()]


SWEEP_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def sweep(convs):
    """pkg/chat/testdata/golden/sweep.jsonl: every distinct template of ollama-utils
    (.cache/templates/sweep, written by tools/testdata.sh) with generic special tokens, each
    conversation's prompt as the first 16 hex digits of its SHA-256 (the files stay small;
    rerun this script to see a prompt), or "!" + the message of a 400 (only when exact)."""
    import hashlib
    d = os.path.join(ROOT, ".cache", "templates", "sweep")
    lines = []
    for fname in sorted(os.listdir(d)):
        with open(os.path.join(d, fname), encoding="utf-8", newline="") as f:
            src = f.read()
        cases = {}
        for c in convs:
            try:
                _, text = render_request(src, SWEEP_SPECIAL, c["request"])
                cases[c["id"]] = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
            except Rejected as exc:
                cases[c["id"]] = "!" + str(exc) if exc.exact else "!"
            except Exception as exc:
                exact = isinstance(exc, TemplateError) and type(exc) is TemplateError
                cases[c["id"]] = "!" + str(exc) if exact else "!"
        lines.append({"template": fname[:-len(".jinja")], "format": detect_content_format(src), "cases": cases})
    return lines

# Small templates that hit Python's string semantics the real templates use only in part:
# str methods and filters with Python whitespace, and Python's repr of strings inside the
# lists and dicts a template prints. Rendered with the conversations whose id starts with
# "py-" into pkg/chat/testdata/golden/probes.jsonl (TestProbes).
PROBES = [
    ("ws-methods", "{% for m in messages %}[{{ m.content.strip() }}|{{ m.content.lstrip() }}|{{ m.content.rstrip() }}|"
     "{{ m.content.split()|join('/') }}|{{ m.content.split(None, 1)|length }}|{{ m.content.split(none, 2)|last }}|"
     "{{ m.content|trim }}|{{ m.content.isspace() }}|{{ m.content.strip().isspace() }}|{{ (m.content ~ ' x').split()|length }}]"
     "{% for i in range(m.content|length) %}{{ 1 if m.content[i].isspace() else 0 }}{% endfor %}\n{% endfor %}"),
    ("ws-isspace-forms", "{% for m in messages %}{{ m.content.isspace() and 'S' or 'N' }}{{ not (m.content[:1]).isspace() }}"
     "{{ m['content'][-1:].isspace() }}{% if m.content and m.content[0].isspace() %}lead{% endif %}|{% endfor %}{{ ' \x1c'.isspace() }}{{ ''.isspace() }}"
     "{{ '\u200b'.isspace() }}{{ '\ufeff'.isspace() }}{{ '\x85\xa0\u3000'.isspace() }}"),
    ("ws-tools", "{% for t in tools or [] %}{{ t.function.description.strip() }}|{{ t.function.description.split()|join('+') }}|"
     "{{ t.function.description|trim }}\n{% endfor %}{% for m in messages %}{% for tc in m.tool_calls or [] %}"
     "{% for k, v in tc.function.arguments.items() %}{{ k }}=[{{ v.strip() if v is string else v }}]{% endfor %}{% endfor %}{% endfor %}"),
    # Jinja2's whitespace control next to output tags, in and after loops (trim_blocks and
    # lstrip_blocks touch only the text right next to a block tag; "-" strips Python whitespace).
    ("ws-control-loop", "{% for m in messages %}{{ m.role }}\n{{ m.content|length }}\n{% endfor %}{{- '|' }}\n"
     "{% for m in messages %}<{{ m.role }}>  {% endfor %}{{- 'G' }}\n{% for m in messages %}{% if m.role == 'user' %}"
     "{{ m.content|trim }}\n{% endif %}{% endfor %}{% if true %}  {% endif %}|{% if true %}\n  {% endif %}|"),
    ("ws-control-markers", "x\n\xa0\u3000{% if true %}y{% endif %}\na \x1c\u2028\n{%- if true -%}\x85\xa0 b{% endif %}\n"
     "a\xa0 {{- 'x' -}} \u3000b{% raw %}\n  {{ x }}\n  {% endraw %}\nq a  {%- raw -%}  {{ x }}  {%- endraw -%}  q\n"
     "  {# c #}\nb{#- c -#}  c  {#+ c +#}\nd\n  {%+ if true +%}\nb{% endif %}a{ \n{%- if true %}b{% endif %}"
     "{{--1}}|{{ 2 - -1 -}} x{% set d = {'a': {'b': 1}}%}\n{{ d.a.b}}\n{% for m in messages %}{{ m.content }} \n{%- endfor %}"),
    # Python's + and - and iter(): what Jinja2 computes, and what raises there (TypeError,
    # UndefinedError), the engine answering with a 400.
    ("op-ok", "{% set n = namespace(s='') %}{% for m in messages %}{% set n.s = n.s + m.role + '|' %}{{ loop.index0 + 1 }}"
     "{{ [m.role] + [loop.index] }}{{ 1 + 2.5 }}{{ true + 1 }}{{ 5 - 2 }}{{ 2.5 - true }}{{ 'a' + 'b' ~ 1 }}{{ ([1] + [2])|length }}"
     "{% for x in m.content %}{% endfor %}{% for x in nothing %}{% endfor %}{% endfor %}{{ n.s }}{{ - 1 + + 2 }}{{ (1,) }}"),
    ("op-str-int", "{{ 'a' + 1 }}"),
    ("op-int-str", "{% set x = 1 + 'a' %}"),
    ("op-str-none", "{% for m in messages %}{{ m.role + none }}{% endfor %}"),
    ("op-str-undefined", "{% set s = 'x' + nothing %}{{ s }}"),
    ("op-undefined-str", "{% if nothing + 'x' %}{% endif %}"),
    ("op-list-tuple", "{{ [1] + (2,) }}"),
    ("op-dict-dict", "{{ {} + {} }}"),
    ("op-sub-str", "{{ 'a' - 'b' }}"),
    ("op-iter-none", "{% for x in none %}{% endfor %}"),
    ("op-iter-int", "{% for m in messages %}{% for x in loop.index %}{% endfor %}{% endfor %}"),
    ("op-tilde-precedence", "{{ 'n' ~ 1 + 2 }}"),
    ("op-chain-calls", "{% for m in messages %}{{ '[' + m.role + ']' + m.tool_calls }}{% endfor %}"),
    ("op-mod", "{{ -7 % 3 }}|{{ 7.5 % -2 }}|{{ -0.0 % 5 }}|{{ 5 % -1 }}|{{ 7 % 2.5 }}|{% for m in messages %}{{ loop.index0 % 2 }}{% endfor %}"),
    ("op-mod-zero", "{{ 1 % 0 }}"),
    ("op-mod-list", "{{ [1] % 2 }}"),
    # Python's printf-style formatting: the % operator of a string and |format.
    ("format", "{{ '%s|%d|%5.2f|%-4s|%x|%r|%i|%05d|%+d|% d|%#x|%#o|%.3s|%e|%g|%G|%c|%%|%3c|%a' % ([1, 'a'], 3, 2.5, 'ab', 255, 'q', 7, -42, 5, 6, 255, 8, 'abcdef', 12345.678, 0.0001234, 1e20, 65, 'z', '\xa0') }}|"
     "{{ '%(a)s-%(b)05.1f' % {'a': none, 'b': 2} }}|{{ '%s'|format(messages|length) }}|{{ '%s-%s'|format('a', [1]) }}|{{ 'v=%s' % none }}|"
     "{{ '%s' % [1, '\x85'] }}|{{ '%d%%' % 50 }}|{{ '%g|%g|%g|%g|%g' % (100000, 1000000, 0.00001, 1.5, 0) }}|{{ '%.0f|%.0e|%.2g|%10.3e|%-8.2f|%*d|%.*f' % (2.5, 15000, 0.000123456, -1234.5, 3.14159, 5, 42, 2, 1.005) }}|"
     "{{ '%s %s'|format(true, none) }}|{{ '%d|%x|%s' % (true, false, 1.0) }}|{{ '%(k)s'|format(k='v') }}|{{ 'ab' % () }}|{{ 'ab' % {'a': 1} }}"
     "{% for m in messages %}{{ '%s: %r|' % (m.role, m.content) }}{{ '%-10s|%10.4s|' % (m.role, m.content) }}{% endfor %}"),
    ("op-format-type", "{{ '%d' % 'x' }}"),
    ("op-format-few", "{{ '%s %s' % ('a',) }}"),
    ("op-format-many", "{{ '%s' % ('a', 'b') }}"),
    ("op-format-char", "{{ '%q' % 1 }}"),
    ("op-format-key", "{{ '%(a)s' % {'b': 1} }}"),
    ("op-format-mapping", "{{ '%(a)s'|format(1) }}"),
    # Python's str() of lists and dicts where the library turns them into text itself.
    ("repr-text", "{% for m in messages %}{{ 'c=' ~ m.content }}|{{ [m.content, none, true]|join(',') }}|{{ [[m.role, m.content]]|join }}|"
     "{{ [m.content]|replace('a', 'b') }}|{{ m|replace('role', 'R', 1) }}|{{ m.content ~ [m.content] }}|{{ [m]|join(attribute='role') }}{% endfor %}"
     "{{ 'p' ~ tools }}{{ ['\xa0'] ~ 1 ~ none }}{{ 'a' ~ 1 + 2 ~ 'b' if false else 'z' }}{{ {'k': '\u2028'}|join('-') }}{{ 'ab'|join('.') }}"),
    # Macro recursion: bounded data renders; a macro recursing into the characters of a
    # string (Hermes-style json_to_python_type on a type list holding "null") raises.
    ("macro-depth", "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}{{ f(150) }}"
     "{% for m in messages %}{{ f(loop.index) }}{% endfor %}"),
    ("op-recursion", "{% macro t(s) %}{% if s is string %}{% for c in s %}{{ t(c) }}{% endfor %}{% endif %}{% endmacro %}"
     "{% for m in messages %}{{ t(m.role) }}{% endfor %}"),
    ("op-length", "{% for m in messages %}{{ m.content|length }}{{ m|length }}{{ m.nothing|length }}{{ [m]|count }}{% endfor %}"
     "{{ (tools or [])|length }}{{ '\u2028é'|length }}"),
    ("op-length-none", "{% if tools|length > 0 %}t{% endif %}"),
    ("op-length-int", "{{ messages[0].role|length|length }}"),
    # Type names built from schemas (Hermes-style json_to_python_type): Jinja2's undefined
    # is iterable, a sequence and callable, so a schema without "type" gives Union[].
    ("types-hermes", "{%- macro py_type(s) %}{%- set basic = {'string': 'str', 'number': 'float', 'integer': 'int', 'boolean': 'bool'} %}"
     "{%- if basic[s.type] is defined %}{{- basic[s.type] }}{%- elif s.type == 'array' %}{{- 'list[' + py_type(s|items) + ']' }}"
     "{%- elif s.type == 'object' %}{%- if s.additionalProperties is defined %}{{- 'dict[str, ' + py_type(s.additionalProperties) + ']' }}"
     "{%- else %}{{- 'dict' }}{%- endif %}{%- elif s.type is iterable %}{{- 'Union[' }}{%- for t in s.type %}{{- py_type({'type': t}) }}"
     "{%- if not loop.last %}{{- ',' }}{%- endif %}{%- endfor %}{{- ']' }}{%- else %}{{- 'Any' }}{%- endif %}{%- endmacro %}"
     "{%- for s in [{'type': 'string'}, {'type': 'array', 'items': {'type': 'integer'}}, {'type': 'array'}, {}, {'type': ['string', 'number']},"
     " {'type': none}, {'type': []}, {'type': 'object', 'additionalProperties': true}, {'type': 'object', 'additionalProperties': {}}, {'type': 3}] %}"
     "{{ py_type(s) }}|{% endfor %}{% for t in tools or [] %}{% for k, v in t.function.parameters.properties.items() %}{{ k }}: {{ py_type(v) }}|{% endfor %}{% endfor %}"
     "{{ nothing is iterable }}{{ nothing is sequence }}{{ nothing is callable }}{{ none is iterable }}{{ nothing is not iterable }}{{ -1 is iterable }}"
     "{{ messages[0].nothing is iterable }}{{ messages is sequence }}{{ 'x' is not sequence }}"),
    ("repr-print", "{% for m in messages %}{{ m.content }}|{% endfor %}{{ messages }}|{{ tools }}"),
    ("repr-containers", "{% for m in messages %}{{ [(m.role, m.content)] }}{{ {'r': [m.content, 1, 2.5, none, true]} }}{% endfor %}"
     "{{ ('x',) }}{{ () }}{{ [[], {}] }}{{ ['\\x85' ~ 'a'] }}{{ {'\\u2028': ('\\xa0',)} }}{{ [1]|string|length }}{{ [' \\x1c ']|trim }}"),
    # Integers beyond int64 (py-bigint: tool schema and tool-call arguments) are Python ints:
    # printed, repr'ed, formatted, serialised and tested as ints, and + - % exact.
    ("bigint-print", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for k, v in tc.function.arguments.items() %}"
     "{{ k }}={{ v }}|{{ v|string }}|{{ 'x' ~ v ~ 'y' }}|{{ [v, k] }}|{{ {k: v} }}|{{ v is number }}{{ v is integer }}{{ v is float }}"
     "{{ v is callable }}{{ v is iterable }}{{ v is defined }}{{ v is not number }}|{{ v|default(0) }}|{{ [v]|join(',') }}\n{% endfor %}{% endfor %}{% endfor %}"
     "{% for t in tools or [] %}{% for k, p in t.function.parameters.properties.items() %}{{ k }}: {{ p }} {{ p.maximum }} {{ p.enum }}\n{% endfor %}{% endfor %}"
     "{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 1.0 is integer }}{{ none is number }}{{ nothing is number }}"),
    ("bigint-format", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for k, v in tc.function.arguments.items() if v is integer %}"
     "{{ '%d|%i|%s|%r|%x|%X|%#x|%o|%#o|%e|%.3g|%f|%30d|%-30d|%+d|% d|%031d|%.25d|%a' % (v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v) }}"
     "{{ '%s'|format(v) }}{{ '%(n)d' % {'n': v} }}\n{% endfor %}{% endfor %}{% endfor %}"),
    ("bigint-tojson", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments|tojson }}\n"
     "{{ tc.function.arguments|tojson(indent=2) }}\n{{ tc.function.arguments|tojson(sort_keys=true, separators=[',', ':']) }}\n"
     "{{ tc.function.arguments|tojson(ensure_ascii=true, indent='\t') }}\n{{ tc.function.arguments.values()|list|tojson(indent=1) }}\n"
     "{% endfor %}{% endfor %}{{ tools|tojson }}\n{{ tools|tojson(indent=4) }}"),
    ("bigint-arith", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for k, v in tc.function.arguments.items() if v is integer %}"
     "{{ v + 1 }}|{{ v - 1 }}|{{ 1 - v }}|{{ v + v }}|{{ v - v }}|{{ v + true }}|{{ v + 0.5 }}|{{ v - 1.5 }}|{{ v % 7 }}|{{ -7 % v }}|{{ v % -7 }}|{{ v % v }}|"
     "{{ v % 2.5 }}|{{ 1e300 % v }}\n{% endfor %}{% endfor %}{% endfor %}{{ 9223372036854775807 + 1 }}|{{ -9223372036854775807 - 2 }}|{{ (9223372036854775807 + 1) - 1 }}"),
    ("bigint-compare", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for k, v in tc.function.arguments.items() if v is integer %}"
     "{{ v < 0 }}{{ v > 9223372036854775807 }}{{ v >= -9223372036854775808 }}{{ v <= 1.8446744073709552e+19 }}{{ v < 1.8446744073709552e+19 }}"
     "{{ v > 1e300 }}{{ 0.5 < v }}{{ v < v + 1 }}{{ [v, 1] < [v, 2] }}{{ [1, v] > [1, 2] }}{{ v < true }}|"
     "{{ v * 3 }}|{{ v * v }}|{{ v * -1.5 }}|{{ v // 7 }}|{{ v // -7 }}|{{ -v // 7 }}|{{ v // 2.5 }}|{{ v / 3 }}|{{ v / v }}|{{ 1 / v }}|"
     "{{ v ** 2 }}|{{ v ** 0 }}|{{ 2 ** -2 }}|{{ -v }}|{{ -(-v) }}|{{ -v|abs if v is not integer else '' }}\n{% endfor %}{% endfor %}{% endfor %}"
     "{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7.5 // -2 }}|{{ -0.0 // 5 }}|{{ 7 / 2 }}|{{ 2 ** 64 }}|{{ 2 ** 0.5 }}|{{ (-8) ** 2 }}|{{ 'ab' * 2 }}|{{ 3 * 'x' }}"
     "|{{ [1] * 2 }}|{{ 'a' * -1 }}|{{ 4611686018427387904 * 2 }}|{{ -9223372036854775807 - 1 }}|{{ -(-9223372036854775807 - 1) }}|{{ - true }}"
     "|{{ 'a' < 'b' }}{{ [1, 'a'] < [1, 'b'] }}{{ 1 < 2.5 }}{{ true < 2 }}{{ 1 <= 1.0 }}{{ 'b' >= 'a' }}{{ (1, 2) < (1, 3) }}"
     "{% for m in messages %}{{ loop.index0 > 0 }}{{ (m.content or '')|length >= 1 }}{% endfor %}"),
    # Big integers in ==, !=, in, not in, the equality tests and the int, float, abs, round,
    # sum, max and min filters (pkg/chat renders these with a template's big variant).
    ("bigint-equal", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}"
     "{{ a.value == a.value }}{{ a.value == a.value + 0 }}{{ a.value != a.value }}{{ a.value == a.edge }}{{ a.value != a.edge }}"
     "{{ a.edge == 9223372036854775807 }}{{ a.edge - 1 == 9223372036854775807 }}{{ a.edge == 9.223372036854775808e18 }}"
     "{{ a.value == 1.8446744073709552e19 }}{{ a.value == 'x' }}{{ a.value == none }}{{ a.value == true }}{{ a.small == 7 }}{{ a.f == 2.5 }}"
     "{{ [a.value] == [a.value] }}{{ {'k': a.big} == {'k': a.big} }}{{ a.list == a.list }}{{ a.list[1] == -9223372036854775807 - 2 }}"
     "{{ (a.value,) == [a.value] }}{{ [a.value, 1] != [a.value, 1] }}|"
     "{{ a.value in [1, a.value] }}{{ a.value in [a.edge] }}{{ a.value not in [a.value] }}{{ a.edge - 1 in a.list }}"
     "{{ a.list[0] + 1 in [a.edge] }}{{ 'value' in a }}{{ a.value in a }}{{ a.big not in a.values()|list }}{{ 1.8446744073709552e19 in [a.value] }}|"
     "{{ a.value is eq a.value }}{{ a.value is equalto(a.value) }}{{ a.value is ne a.edge }}{{ a.value is not eq a.edge }}"
     "{{ a.value is in [a.value] }}{{ a.value is not in a.list }}{{ a.edge is eq(a.value) }}|"
     "{% if a.value == a.value %}if{% endif %}{% if a.value != a.value %}no{% elif a.big == a.big %}elif{% endif %}"
     "{% set s = a.value == a.value %}{{ s }}{% for x in a.list if x == a.list[1] %}{{ x }}{% endfor %}{{ 'y' if a.big == a.big else 'n' }}"
     "{{ a.small == 7.0 }}{{ messages[0].role == 'user' }}{{ [1, 2] == [1, 2] }}{{ (1,) == [1] }}{{ 'a' in 'abc' }}{{ 'user' in messages[0].values()|list }}"
     "{% endif %}{% endfor %}{% endfor %}"),
    ("bigint-filters", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}"
     "{{ a.value|int }}|{{ a.neg|int }}|{{ a.value|int(5) }}|{{ a.small|int }}|{{ '12'|int }}|{{ a.value|float }}|{{ a.neg|float }}|{{ a.small|float }}|"
     "{{ a.neg|abs }}|{{ a.value|abs }}|{{ a.small|abs }}|{{ (-9223372036854775807 - 1)|abs }}|{{ a.f|abs }}|"
     "{{ a.value|round }}|{{ a.value|round(2) }}|{{ a.value|round(-1) }}|{{ a.value|round(-3) }}|{{ a.big|round(-5) }}|{{ a.neg|round(-1) }}|"
     "{{ a.value|round(-25) }}|{{ a.value|round(-20) }}|{{ a.value|round(-19) }}|{{ a.value|round(precision=-2) }}|{{ a.value|round(1, 'ceil') }}|"
     "{{ a.value|round(0, 'floor') }}|{{ a.value|round(-2, 'ceil') }}|{{ a.neg|round(-1, 'floor') }}|"
     "{{ a.list|sum }}|{{ [a.value, 1]|sum }}|{{ [a.value, a.neg]|sum }}|{{ [a.value, 0.5]|sum }}|{{ [1, 2]|sum(start=a.value) }}|{{ [1, 2]|sum }}|"
     "{{ [{'n': a.value}, {'n': 1}]|sum(attribute='n') }}|{{ a.list|max }}|{{ a.list|min }}|{{ [a.value, a.edge, 1]|max }}|{{ [a.value, a.neg, 2.5]|min }}|"
     "{{ [a.small, a.value]|max }}|{{ [{'n': a.value}, {'n': a.edge}]|max(attribute='n') }}|{{ [{'n': a.value}, {'n': a.edge}]|min(attribute='n') }}|"
     "{{ [3, 1]|max }}|{{ [a.value, a.value + 0]|max is eq a.value }}"
     "{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-in-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ a.value in 'abc' }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-in-int", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ 1 in a.value }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-float-overflow", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ (a.value ** 20)|float }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-max-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ [a.value, 'x']|max }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-min-none", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ [a.value, none]|min }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-sum-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ [a.value, 'x']|sum }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-round-method", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ a.value|round(0, 'up') }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-round-float", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}{% if a.value is defined %}{{ a.value|round(1.5) }}{% endif %}{% endfor %}{% endfor %}"),
    # |int of a float beyond int64: Python's exact integer (the library's gives 0).
    ("int-float-big", "{{ 1e20|int }}|{{ (-1e20)|int }}|{{ 1.5e300|int|string|length }}|{{ 9.3e18|int }}|{{ (1e20|int) + 1 }}|"
     "{{ 2.5|int }}|{{ (-9.2e18)|int }}|{{ 1e20|int|string }}|{{ [1e20|int]|tojson }}"),
    # Big integers a template's own arithmetic makes in a request that holds none: the plain
    # variant's render is redone with the big variant.
    ("bigint-made", "{{ 2 ** 64 == 2 ** 64 }}|{{ 2 ** 64 != 2 ** 64 + 1 }}|{{ 2 ** 64 in [2 ** 64] }}|{{ (2 ** 63) * 2 == 2 ** 64 }}|"
     "{{ (1e20|int) == (1e20|int) }}|{{ (1e20|int) > 5 }}|{{ [2 ** 64]|max == 2 ** 64 }}|{{ 2 ** 64 is eq 2 ** 64 }}|"
     "{% set ns = namespace(n=[]) %}{% for m in messages %}{% set ns.n = ns.n + [m.role] %}{% endfor %}{{ ns.n|length }}|{{ messages|length * 2 ** 64 == 2 ** 64 * messages|length }}"),
    ("bigint-made-error", "{{ 2 ** 64 }}{{ 2 ** 64 < 'a' }}"),
    ("op-lt-str-int", "{{ 'a' < 1 }}"),
    ("op-gt-none", "{% for m in messages %}{{ m.nothing > 1 }}{% endfor %}"),
    ("op-le-list-str", "{{ [1] <= 'a' }}"),
    ("op-ge-none-int", "{{ none >= 1 }}"),
    ("op-lt-list-tuple", "{{ [1] < (1,) }}"),
    ("op-div-zero", "{{ 1 / 0 }}"),
    ("op-fdiv-zero", "{{ 1 // 0 }}"),
    ("op-fdiv-float-zero", "{{ 1.5 // 0.0 }}"),
    ("op-div-str", "{{ 'a' / 2 }}"),
    ("op-mul-str-float", "{{ 'a' * 2.5 }}"),
    ("op-mul-list-list", "{{ [1] * [2] }}"),
    ("op-neg-str", "{% for m in messages %}{{ -m.role }}{% endfor %}"),
    ("op-neg-list", "{{ -[1] }}"),
    ("op-pow-zero", "{{ 0 ** -1 }}"),
    ("op-pow-str", "{{ 'a' ** 2 }}"),
    ("op-bigint-div-zero", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.value / 0 }}{% endfor %}{% endfor %}"),
    ("op-bigint-fdiv-zero", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.big // 0 }}{% endfor %}{% endfor %}"),
    ("op-bigint-lt-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.value < 'a' }}{% endfor %}{% endfor %}"),
    ("op-bigint-mul-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ 'ab' * tc.function.arguments.value }}{% endfor %}{% endfor %}"),
    ("op-bigint-mod-zero", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.value % 0 }}{% endfor %}{% endfor %}"),
    ("op-bigint-add-str", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.value + 'x' }}{% endfor %}{% endfor %}"),
    ("op-bigint-iter", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for x in tc.function.arguments.value %}{% endfor %}{% endfor %}{% endfor %}"),
    ("op-bigint-call", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% if tc.function.arguments.value is defined %}{{ tc.function.arguments.value() }}{% endif %}{% endfor %}{% endfor %}"),
    ("op-bigint-char", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ '%c' % tc.function.arguments.value }}{% endfor %}{% endfor %}"),
    # Jinja2's Undefined prints as "" and is falsy, but raises UndefinedError when an
    # attribute, an item or a slice is taken of it; the message names where it came from
    # ("op-undef-" probes record it whole).
    ("op-undef-name-attr", "{{ nothing.x }}"),
    ("op-undef-name-item", "{{ nothing['x'] }}"),
    ("op-undef-name-slice", "{{ nothing[1:] }}"),
    ("op-undef-name-call", "{{ nothing.strip() }}"),
    ("op-undef-key-attr", "{% for m in messages %}{{ m.nokey.x }}{% endfor %}"),
    ("op-undef-key-item", "{% for m in messages %}{{ m['no key']['x'] }}{% endfor %}"),
    ("op-undef-past-end", "{{ messages[99].role }}"),
    ("op-undef-tools", "{% if tools[0].function is defined %}T{% endif %}"),
    ("op-undef-default", "{{ nothing|default('d') }}|{{ nothing.x|default('d') }}"),
    ("op-undef-previtem", "{% for m in messages %}{{ loop.previtem.role }}{% endfor %}"),
    ("op-undef-namespace", "{% set ns = namespace(a=1) %}{{ ns.a }}|{{ ns.b }}|{{ ns.b.c }}"),
    ("op-undef-none", "{{ none.x }}|{{ none.x is defined }}|{{ none.x.y }}"),
    ("op-undef-set", "{% set t = messages[0].nokey %}{{ t is defined }}{% set u = t['k'] %}"),
    ("op-undef-ok", "{{ nothing }}|{{ nothing is defined }}|{% for x in nothing %}{% endfor %}{{ messages[99] }}|"
     "{{ nothing ~ 'x' }}|{{ nothing|length }}|{{ messages[0].nokey is defined }}|{{ 'x' if nothing else 'y' }}|"
     "{{ messages[0].get('nokey').x }}|{% for m in messages %}{{ m.content.nomethod is defined }}{% endfor %}|"
     "{{ (tools or [{}])[0].function is defined }}|{{ nothing.x if false else 'z' }}"),
    # Comparison chains: Python's a < b < c is a < b and b < c, each operand evaluated once.
    ("op-chain", "{{ 3 > 2 > 1 }}|{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 1 == 1 == 1 }}|{{ 2 == 2 == true }}|"
     "{{ 0 < messages|length <= 100 }}|{{ 'a' < 'b' < 'c' }}|{{ 1 != 2 != 1 }}|{{ 1 < 2 > 0 }}|{{ 2 > 1 == 1 }}|"
     "{{ 1 in [1] in [[1]] }}|{{ 0 <= 1 < 2 < 3 }}|{{ 3 < 2 < 'x' }}"),
    # Integer literals the library's lexer does not read: beyond int64, with '_', with a base.
    ("int-literals", "{{ 18446744073709551616 }}|{{ 18446744073709551616 == 18446744073709551616 }}|{{ -9223372036854775808 }}|"
     "{{ 9223372036854775807 + 1 }}|{{ 1_000 }}|{{ 0x1F }}|{{ 0o17 + 0b101 }}|{{ 0XFF_FF }}|{{ [99999999999999999999]|tojson }}|"
     "{% set n = 123456789012345678901234567890 %}{{ n // 10 }}|{{ n is number }}|{{ n > 1 < 2 }}|{{ 1e3 }}|{{ 0 }}|{{ 00 }}|{{ 10.5 }}"),
    ("op-bigint-select", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set v = tc.function.arguments.value %}"
     "{{ [v, 1, v]|select('equalto', v)|list|length }}|{{ [{'n': v}, {'n': 2}]|selectattr('n', 'eq', v)|list|length }}|"
     "{{ [{'n': v}]|rejectattr('n', '==', v)|list|length }}|{{ [v, 1]|select('gt', 5)|list|length }}|{{ [v, 1]|reject('in', [v])|list }}|"
     "{{ [{'a': {'b': v} }]|selectattr('a.b', 'equalto', v)|list|length }}|{{ [v]|select|list|length }}|{{ [v, 3]|select('ne', 3)|list|length }}|"
     "{{ [[v]]|selectattr('0', 'equalto', v)|list|length }}|{{ [{'m': 1}]|selectattr('n', 'equalto', v)|list|length }}|"
     "{{ [v, 2]|select('lessthan', v)|list }}|{{ [v, 'x']|select('string')|list }}|{{ [1, 2]|select('==', 2)|list }}{% endfor %}{% endfor %}"),
    ("op-bigint-select-types", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set v = tc.function.arguments.value %}"
     "{{ [v, 'a']|select('<', 3)|list }}{% endfor %}{% endfor %}"),
    # Jinja2's immutable sandbox: a method that changes a list or a dict raises SecurityError
    # when called (messages or tools altered by a template never render).
    ("op-sandbox-append", "{% set l = [1] %}{% set _ = l.append(2) %}{{ l }}"),
    ("op-sandbox-pop", "{{ messages.pop() }}"),
    ("op-sandbox-remove", "{% set l = [1] %}{{ l.remove(1) }}"),
    ("op-sandbox-sort", "{% set l = [2, 1] %}{{ l.sort() }}"),
    ("op-sandbox-dict-update", "{% for m in messages %}{% set _ = m.update({'role': 'x'}) %}{{ m.role }}{% endfor %}"),
    ("op-sandbox-dict-pop", "{% set d = {'a': 1} %}{{ d.pop('a') }}"),
    ("op-sandbox-setdefault", "{% set d = {'a': 1} %}{{ d.setdefault('b', 2) }}"),
    ("sandbox-safe", "{% set d = {'a': 1, 'b': [3, 1]} %}{{ d.get('a') }}|{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}|"
     "{{ d.b|sort }}|{{ d.b|reverse|list }}|{{ d.copy() if false else 'c' }}|{{ messages[0].role }}"),
    ("op-chain-types", "{{ 1 < 2 < 'a' }}"),
    ("op-chain-types-eq", "{{ 1 == 1 < 'a' }}"),
    ("op-chain-more", "{{ 1 not in [2] not in [[1]] }}|{{ 'a' in 'abc' in ['abc'] }}|{{ none == none != 1 }}|{{ 2 > 1 > 0 > -1 }}|"
     "{{ 1 < 2 < 3 and 3 > 2 }}|{{ not 1 < 2 < 3 }}|{{ (1 < 2) < 3 }}|{{ 1 + 1 < 2 * 2 < 10 - 1 }}|{{ [1] < [2] <= [2] }}|"
     "{% set xs = [1, 2, 3] %}{{ xs|select('lt', 3)|list }}|{% if 0 < messages|length < 50 %}in{% endif %}|{{ 1 < 2 < 'a' if false else 'ok' }}|"
     "{% for m in messages if 0 < m.role|length < 5 %}{{ m.role }}{% endfor %}"),
    ("op-chain-bigint", "{% for m in messages %}{% for tc in m.tool_calls or [] %}{% set v = tc.function.arguments.value %}"
     "{{ v == v == v }}|{{ 0 < v < v + 1 }}|{{ v > 0 > -1 }}{% endfor %}{% endfor %}"),
    # |int of a string: int(s, base), else int(float(s)), else the default; int() of an
    # infinite float raises OverflowError, which do_int does not catch.
    ("int-string", "{{ '1e20'|int }}|{{ '12'|int }}|{{ ' 12 '|int }}|{{ '1.5'|int }}|{{ 'x'|int }}|{{ '1_000'|int }}|"
     "{{ '-3.9'|int }}|{{ 'nan'|int }}|{{ '99999999999999999999'|int }}|{{ '-99999999999999999999'|int(3) }}|"
     "{{ '0x1A'|int(0, 16) }}|{{ '1A'|int(base=16) }}|{{ '12.0'|int(5, 16) }}|{{ '1e-5'|int }}|{{ '\u0663'|int }}|{{ ''|int(4) }}|"
     "{{ '-0'|int }}|{{ '+7'|int }}|{{ '7.'|int }}|{{ '.5e1'|int }}|{{ '1__0'|int(9) }}|{{ '1e20'|int is number }}"),
    ("op-int-string-inf", "{{ 'inf'|int }}"),
    # (Not a constant: Jinja2 folds 1e308 * 10 into code naming inf, a NameError.)
    ("op-int-float-inf", "{{ (messages|length * 1e308 * 10)|int }}"),
    ("int-float", "{{ (messages|length * 1e308 * 10 * 0)|int(5) }}|{{ -2.5|int }}|{{ 1e20|int }}|{{ -1e19|int }}|{{ 3.99|int(1) }}|{{ true|int }}|{{ none|int(2) }}|{{ [1]|int }}"),
    ("int-string-more", "{{ ' \u3000-1_0 \x85'|int }}|{{ '0b101'|int(base=0) }}|{{ '0o17'|int(0) }}|{{ '010'|int(7, 0) }}|{{ '0_0'|int(7, 0) }}|"
     "{{ '0x_f'|int(0, 16) }}|{{ '--5'|int(7) }}|{{ '1_'|int(7) }}|{{ '_1'|int(7) }}|{{ 'z'|int(7, 36) }}|{{ '12'|int(7, 37) }}|"
     "{{ '12'|int(7, 1) }}|{{ '1.5e3'|int }}|{{ '1_0.5_0e1_0'|int }}|{{ '1._5'|int(7) }}|{{ '-inf'|int(7) if false else 1 }}|"
     "{{ '+nan'|int(7) }}|{{ 'Infinity'|length }}|{{ '0x10'|int(7) }}|{{ '1e-400'|int }}|{{ '\u0661\u0662.5'|int }}|{{ '\u00b2'|int(7) }}|"
     "{{ '1' * 5000 | int(7) if false else 2 }}|{{ '12'|int('x') }}"),
    ("op-int-string-big-exp", "{{ '1e400'|int }}"),
    ("op-dict-items", "{% set d = {'b': 1, 'a': [2]} %}{{ d.items()|list }}|{{ (d|dictsort)[0] == ['a', [2]] }}|{{ (d|dictsort)[0] == ('a', [2]) }}"),
    ("dictsort", "{% set d = {'b': 1, 'a': [2]} %}{{ d|dictsort }}|{{ d|dictsort|first }}|"
     "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{{ d|dictsort(reverse=true)|list }}"),
    ("repr-string", "{% for m in messages %}{{ m|string }}{{ m.content|string }}{{ [m.role, m.content] }}{% endfor %}"
     "{{ ['it\\'s', 'a\"b', 'x\\'y\"z', '', '\\\\'] }}{{ {'k\\'': 'v\"'} }}"),
]


def probes(convs):
    ids = [pid for pid, _ in PROBES]
    dup = sorted({pid for pid in ids if ids.count(pid) > 1})
    if dup:
        sys.exit("PROBES: duplicate ids %s" % ", ".join(dup))
    lines = []
    for pid, src in PROBES:
        cases = {}
        for c in convs:
            if not c["id"].startswith("py-"):
                continue
            try:
                _, cases[c["id"]] = render_request(src, SWEEP_SPECIAL, c["request"])
            except Exception as exc:
                cases[c["id"]] = "!" + type(exc).__name__
                if pid.startswith("op-undef-") or pid.startswith("op-sandbox-"):
                    cases[c["id"]] += ": " + str(exc)
        lines.append({"id": pid, "source": src, "cases": cases})
    return lines


def main():
    check = sys.argv[1:] == ["--check"]
    with open(os.path.join(TESTDATA, "conversations.jsonl"), encoding="utf-8") as f:
        convs = [json.loads(l) for l in f if l.strip()]
    os.makedirs(os.path.join(TESTDATA, "golden"), exist_ok=True)
    failed = False
    for name, src, special, family in load_templates():
        lines = []
        for c in convs:
            try:
                fmt, text = render_request(src, special, c["request"])
                lines.append({"id": c["id"], "format": fmt, "prompt": text})
            except Rejected as exc:
                lines.append({"id": c["id"], "format": detect_content_format(src), "error": str(exc), "exact": exc.exact})
            except Exception as exc:  # vLLM: any template exception → 400 with str(exc)
                lines.append({"id": c["id"], "format": detect_content_format(src), "error": str(exc),
                              "exact": isinstance(exc, TemplateError) and type(exc) is TemplateError})
        path = os.path.join(TESTDATA, "golden", name + ".jsonl")
        if check:
            with open(path, encoding="utf-8") as f:
                old = [json.loads(l) for l in f if l.strip()]
            for a, b in zip(old, lines):
                a.pop("ids", None)
                if a != b:
                    print("%s %s: committed golden differs from the reference" % (name, b["id"]), file=sys.stderr)
                    failed = True
            if len(old) != len(lines):
                print("%s: %d committed cases, %d now" % (name, len(old), len(lines)), file=sys.stderr)
                failed = True
            continue
        prompts = [l["prompt"] for l in lines if "prompt" in l]
        ids = iter(token_ids(family, prompts))
        with open(path, "w", encoding="utf-8") as f:
            for l in lines:
                if "prompt" in l:
                    l["ids"] = next(ids)
                f.write(json.dumps(l, ensure_ascii=False) + "\n")
        n_err = sum("error" in l for l in lines)
        print("%-16s format=%-6s cases=%d rejected=%d -> %s" % (name, detect_content_format(src), len(lines), n_err, os.path.relpath(path, ROOT)))
    sweep_path = os.path.join(TESTDATA, "golden", "sweep.jsonl")
    lines = sweep(convs)
    if check:
        with open(sweep_path, encoding="utf-8") as f:
            if [json.loads(l) for l in f if l.strip()] != lines:
                print("sweep: committed golden differs from the reference", file=sys.stderr)
                failed = True
    else:
        with open(sweep_path, "w", encoding="utf-8") as f:
            for l in lines:
                f.write(json.dumps(l, ensure_ascii=False) + "\n")
        print("sweep: %d templates -> %s" % (len(lines), os.path.relpath(sweep_path, ROOT)))
    probes_path = os.path.join(TESTDATA, "golden", "probes.jsonl")
    lines = probes(convs)
    if check:
        with open(probes_path, encoding="utf-8") as f:
            if [json.loads(l) for l in f if l.strip()] != lines:
                print("probes: committed golden differs from the reference", file=sys.stderr)
                failed = True
    else:
        with open(probes_path, "w", encoding="utf-8") as f:
            for l in lines:
                f.write(json.dumps(l, ensure_ascii=False) + "\n")
        print("probes: %d templates -> %s" % (len(lines), os.path.relpath(probes_path, ROOT)))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
