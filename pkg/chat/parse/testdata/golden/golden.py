#!/usr/bin/env python3
"""Writes the golden cases of pkg/chat/parse's output parsers (one JSON file per parser).

Every case is written by hand from the formats of vLLM's parsers (file names in the
notes) and the models' chat templates. Expected arguments of the JSON formats are what vLLM's
non-streaming path sends, json.dumps(json.loads(...)) with the parser's ensure_ascii, so they
are computed here with Python's own json module: dumps() below is the reference, not the
code under test. Run it from this directory: python3 golden.py
"""

import json

U = "\u00e9"  # é


def dumps(text, ascii_=False):
    return json.dumps(json.loads(text), ensure_ascii=ascii_)


def case(name, text, content=None, reasoning=None, calls=(), finish="stop", req=None, note=""):
    c = {"name": name, "text": text, "want": {"content": content, "reasoning": reasoning,
                                              "tool_calls": [{"name": n, "arguments": a} for n, a in calls]},
         "finish": finish}
    if req:
        c["request"] = req
    if note:
        c["note"] = note
    return c


TOOLS = {"tools": True}

# ---------------------------------------------------------------- hermes (+ qwen3 reasoning)
ARGS1 = '{"city": "Par\\u00eds", "days": 3, "temp": 1.50, "big": 1e2, "tiny": 1E-7, ' \
        '"neg": -0, "negf": -0.0, "huge": 123456789012345678901234567890, "esc": "a\\/b\\tc\\u0001\\"", ' \
        '"emoji": "\\ud83d\\ude00", "lone": "\\ud83d!", "list": [true, false, null, {"x": []}]}'
hermes = {"reasoning": "qwen3", "tool": "hermes", "cases": [
    case("plain content, no tools", "Hello! How can I help?", content="Hello! How can I help?",
         reasoning=None, req={"reasoning_ended": True}),
    case("qwen3 think then one call",
         "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n"
         '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
         reasoning="\nThe user wants the weather.\n", content="\n\n",
         calls=[("get_weather", '{"city": "Paris"}')], finish="tool_calls", req=TOOLS,
         note="qwen3_reasoning_parser: content after </think> kept as is; hermes: content before the first <tool_call>"),
    case("template opened <think> in the prompt",
         "Thinking only.</think>Answer.", reasoning="Thinking only.", content="Answer."),
    case("truncated reasoning", "<think>still thinking", reasoning="still thinking",
         note="no </think>: all reasoning, content null"),
    case("enable_thinking=false", "Plain <think>x</think> answer", content="Plain <think>x</think> answer",
         req={"reasoning_ended": True}),
    case("empty think block", "<think>\n\n</think>\n\nHi", reasoning="\n\n", content="\n\nHi"),
    case("intro text and two calls, im_end stripped",
         "I'll check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call><|im_end|>",
         content="I'll check both.\n", calls=[("a", '{"x": 1}'), ("b", "{}")], finish="tool_calls",
         req={"tools": True, "reasoning_ended": True}),
    case("json.dumps formatting of arguments",
         '<tool_call>\n{"name": "f", "arguments": ' + ARGS1 + '}\n</tool_call>',
         calls=[("f", json.dumps(json.loads(ARGS1), ensure_ascii=False).replace('"\ud83d!"', '"\\ud83d!"'))],
         finish="tool_calls", req={"tools": True, "reasoning_ended": True},
         note="a lone surrogate cannot be UTF-8: written as \\ud83d (Python would keep the code point)"),
    case("arguments before name",
         '<tool_call>{"arguments": {"q": "x"}, "name": "search"}</tool_call>',
         calls=[("search", '{"q": "x"}')], finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
    case("pretty-printed JSON, extra key dropped",
         '<tool_call>\n{\n  "name": "f",\n  "id": 7,\n  "arguments": {\n    "a": [\n      1,\n      2\n    ]\n  }\n}\n</tool_call>',
         calls=[("f", '{"a": [1, 2]}')], finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
    case("string arguments", '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
         calls=[("f", dumps('"{\\"a\\": 1}"'))], finish="tool_calls",
         req={"tools": True, "reasoning_ended": True}, note="json.dumps of a str argument value is a JSON string"),
    case("no closing tag at end of output",
         '<tool_call>\n{"name": "f", "arguments": {"a": 1}}', calls=[("f", '{"a": 1}')],
         finish="tool_calls", req={"tools": True, "reasoning_ended": True},
         note="vLLM's regex alternative <tool_call>(.*) accepts an unterminated last call"),
    case("invalid JSON before commit is content",
         'Hi <tool_call>\n{"name": oops}\n</tool_call>', content='Hi <tool_call>\n{"name": oops}\n</tool_call>',
         req={"tools": True, "reasoning_ended": True}),
    case("missing arguments is content", '<tool_call>{"name": "f"}</tool_call>',
         content='<tool_call>{"name": "f"}</tool_call>', req={"tools": True, "reasoning_ended": True}),
    case("non-string name is content", '<tool_call>{"name": 1, "arguments": {}}</tool_call>',
         content='<tool_call>{"name": 1, "arguments": {}}</tool_call>', req={"tools": True, "reasoning_ended": True}),
    case("truncated before the name is content", '<tool_call>\n{"name": "get_wea',
         content='<tool_call>\n{"name": "get_wea', req={"tools": True, "reasoning_ended": True}),
    case("truncated inside arguments keeps the call",
         '<tool_call>\n{"name": "f", "arguments": {"city": "Par', calls=[("f", '{"city": "Par')],
         finish="tool_calls", req={"tools": True, "reasoning_ended": True},
         note="deviation: vLLM non-streaming makes it content, its streaming sends the partial call"),
    case("error inside arguments: rest of the call raw",
         '<tool_call>{"name": "f", "arguments": {"a": 1,}}\n</tool_call>', calls=[("f", '{"a": 1, }}\n')],
         finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
    case("number cut short by the end marker", '<tool_call>{"name": "f", "arguments": [1, 2.50</tool_call>',
         calls=[("f", "[1, 2.5")], finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
    case("missing outer brace keeps the call",
         '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', calls=[("f", '{"a": 1}')],
         finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
    case("text after a call is content",
         'Intro\n<tool_call>{"name": "f", "arguments": {}}</tool_call>\n\nDone.',
         content="Intro\nDone.", calls=[("f", "{}")], finish="tool_calls",
         req={"tools": True, "reasoning_ended": True}, note="deviation: vLLM drops text after the first call"),
    case("partial marker at the end is content", "See <tool_ca", content="See <tool_ca",
         req={"tools": True, "reasoning_ended": True}),
    case("tool_choice none: markers are content",
         '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
         content='<tool_call>{"name": "f", "arguments": {}}</tool_call>',
         req={"tools": True, "tool_choice": "none", "reasoning_ended": True}),
    case("duplicate argument keys are kept in order", '<tool_call>{"name": "f", "arguments": {"a": 1, "a": 2}}</tool_call>',
         calls=[("f", '{"a": 1, "a": 2}')], finish="tool_calls", req={"tools": True, "reasoning_ended": True},
         note="deviation: json.loads keeps the last value, giving {\"a\": 2}"),
    case("call inside reasoning stays reasoning",
         '<think>maybe <tool_call>{"name": "f", "arguments": {}}</tool_call></think>ok',
         reasoning='maybe <tool_call>{"name": "f", "arguments": {}}</tool_call>', content="ok", req=TOOLS),
    case("qwen3 implicit end of reasoning before an XML call",
         "reasoning<tool_call>\n<function=f>\n</function>\n</tool_call>",
         reasoning="reasoning", content="<tool_call>\n<function=f>\n</function>\n</tool_call>", req=TOOLS,
         note="qwen3_reasoning_parser: <tool_call> + <function= ends reasoning; hermes cannot parse XML, so content"),
    case("second call broken: first kept, second content",
         '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": b}</tool_call>',
         content='<tool_call>{"name": b}</tool_call>', calls=[("a", "{}")], finish="tool_calls",
         req={"tools": True, "reasoning_ended": True},
         note="deviation: vLLM non-streaming makes the whole output content when any call fails"),
    case("non-ASCII in arguments stays raw", '<tool_call>{"name": "f", "arguments": {"c": "' + U + '\\u00e9"}}</tool_call>',
         calls=[("f", '{"c": "' + U + U + '"}')], finish="tool_calls", req={"tools": True, "reasoning_ended": True}),
]}

# ---------------------------------------------------------------- llama3_json
llama = {"reasoning": "", "tool": "llama3_json", "cases": [
    case("plain content", "The capital is Paris.", content="The capital is Paris."),
    case("one call with parameters",
         '{"name": "get_weather", "parameters": {"city": "San Francisco", "unit": "celsius"}}',
         calls=[("get_weather", '{"city": "San Francisco", "unit": "celsius"}')], finish="tool_calls", req=TOOLS),
    case("python_tag prefix", '<|python_tag|>{"name": "f", "arguments": {"a": 1.0}}',
         calls=[("f", '{"a": 1.0}')], finish="tool_calls", req=TOOLS),
    case("two calls separated by ;",
         '{"name": "a", "parameters": {"x": "' + U + '"}}; {"name": "b", "parameters": {}}',
         calls=[("a", '{"x": "' + U + '"}'), ("b", "{}")], finish="tool_calls", req=TOOLS,
         note="ensure_ascii=False as in the version read"),
    case("first of parameters/arguments wins",
         '{"name": "f", "parameters": {"p": 1}, "arguments": {"a": 2}}', calls=[("f", '{"p": 1}')],
         finish="tool_calls", req=TOOLS),
    case("JSON without name is content", '{"city": "Paris"}', content='{"city": "Paris"}', req=TOOLS),
    case("text first is content", 'Sure: {"name": "f", "parameters": {}}',
         content='Sure: {"name": "f", "parameters": {}}', req=TOOLS,
         note="vLLM streaming rule (output must start with { or <|python_tag|>)"),
    case("truncated inside parameters", '{"name": "f", "parameters": {"q": [1, 2',
         calls=[("f", '{"q": [1, 2')], finish="tool_calls", req=TOOLS),
    case("text after the call is content", '{"name": "f", "parameters": {}}\nHope that helps.',
         content="Hope that helps.", calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("python_tag then prose is content", "<|python_tag|>print(1)", content="<|python_tag|>print(1)", req=TOOLS),
    case("broken JSON before commit is content", '{"name": "f", parameters: {}}',
         content='{"name": "f", parameters: {}}', req=TOOLS),
]}

# ---------------------------------------------------------------- deepseek_v3 (+ deepseek_r1)
B, E, CB, CE, SEP = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def dscall(name, args, typ="function"):
    return CB + typ + SEP + name + "\n```json\n" + args + "\n```" + CE


deepseek = {"reasoning": "deepseek_r1", "tool": "deepseek_v3", "cases": [
    case("R1 reasoning then answer", "Let me see.\n</think>\n\nThe answer is 4.",
         reasoning="Let me see.\n", content="\n\nThe answer is 4."),
    case("R1 output that repeats <think>", "<think>\nabc</think>x", reasoning="\nabc", content="x"),
    case("R1 reasoning, two calls",
         "Need tools.</think>Checking." + B + dscall("get_weather", '{"location": "Tokyo"}') + "\n"
         + dscall("get_time", '{"tz":"JST"}') + E,
         reasoning="Need tools.", content="Checking.",
         calls=[("get_weather", '{"location": "Tokyo"}'), ("get_time", '{"tz":"JST"}')], finish="tool_calls", req=TOOLS,
         note="arguments raw, not re-serialised"),
    case("multi-line arguments", "</think>" + B + dscall("f", '{\n  "a": 1\n}') + E,
         calls=[("f", '{\n  "a": 1\n}')], finish="tool_calls", req=TOOLS,
         note="deviation: vLLM's regex has no DOTALL and drops such a call"),
    case("type other than function is content", "</think>" + B + dscall("f", "{}", typ="python") + E,
         content=dscall("f", "{}", typ="python") + E, req=TOOLS,
         note="the malformed call and what follows it (the calls-end marker too) are content"),
    case("missing fence is content", "</think>" + B + CB + "function" + SEP + "f\n{}" + CE + E,
         content=CB + "function" + SEP + "f\n{}" + CE + E, req=TOOLS,
         note="the header text is content from <｜tool▁call▁begin｜> on; the calls-begin marker is consumed"),
    case("truncated arguments keep the call", "</think>" + B + CB + "function" + SEP + "f\n```json\n{\"a\": ",
         calls=[("f", '{"a": ')], finish="tool_calls", req=TOOLS),
    case("text after the calls block", "</think>" + B + dscall("f", "{}") + E + "\nDone",
         content="Done", calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("markers without tools are content", "</think>" + B + dscall("f", "{}") + E,
         content=B + dscall("f", "{}") + E),
]}

# ---------------------------------------------------------------- mistral
mistral = {"reasoning": "", "tool": "mistral", "cases": [
    case("content only", "Bonjour!", content="Bonjour!"),
    case("pre-v11 JSON array",
         'Let me check.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "t": 2.50}}, '
         '{"name": "get_time"}]</s>',
         content="Let me check.", calls=[("get_weather", '{"city": "Paris", "t": 2.5}'), ("get_time", "{}")],
         finish="tool_calls", req=TOOLS, note="arguments default to {}; </s> skipped as vLLM's detokenizer does"),
    case("v11 name form with [ARGS]", '[TOOL_CALLS]add[ARGS]{"a": 3.5, "b": 4}',
         calls=[("add", '{"a": 3.5, "b": 4}')], finish="tool_calls", req=TOOLS),
    case("v11 name form, two calls, raw arguments", '[TOOL_CALLS]add{"a":1}[TOOL_CALLS]sub{"x": 1.50}',
         calls=[("add", '{"a":1}'), ("sub", '{"x": 1.50}')], finish="tool_calls", req=TOOLS),
    case("v11 malformed arguments stay a call", '[TOOL_CALLS]f{"a": ', calls=[("f", '{"a": ')],
         finish="tool_calls", req=TOOLS),
    case("pre-v11 array keeps non-ASCII raw", '[TOOL_CALLS][{"name": "f", "arguments": {"v": "\\u00e9t' + U + '"}}]',
         calls=[("f", '{"v": "' + U + 't' + U + '"}')], finish="tool_calls", req=TOOLS),
    case("name without arguments is content", "[TOOL_CALLS]lonely", content="[TOOL_CALLS]lonely", req=TOOLS),
    case("array with a non-object is content", '[TOOL_CALLS][1, 2]', content="[TOOL_CALLS][1, 2]", req=TOOLS),
]}

# ---------------------------------------------------------------- openai / Harmony
ST, CH, MS, CO, EN, CA, RE = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"
harmony = {"reasoning": "openai_gptoss", "tool": "openai", "cases": [
    case("analysis then final", CH + "analysis" + MS + "User says hi." + EN + ST + "assistant" + CH + "final" + MS
         + "Hello!" + RE, reasoning="User says hi.", content="Hello!"),
    case("tool call, ensure_ascii",
         CH + "analysis" + MS + "Need weather." + EN + ST + "assistant" + CH + "commentary to=functions.get_weather "
         + CO + "json" + MS + '{"city":"P' + U + 'ris","days":2.0}' + CA,
         reasoning="Need weather.", calls=[("get_weather", dumps('{"city":"P' + U + 'ris","days":2.0}', True))],
         finish="tool_calls", req=TOOLS, note="openai_tool_parser: json.dumps(json.loads(text)), ensure_ascii=True"),
    case("recipient in the role part of the header",
         ST + "assistant to=functions.lookup" + CH + "commentary json" + MS + '{"q": 1}' + CA,
         calls=[("lookup", '{"q": 1}')], finish="tool_calls", req=TOOLS),
    case("preamble and final joined", CH + "commentary" + MS + "Checking..." + EN + ST + "assistant" + CH
         + "final" + MS + "Done." + RE, content="Checking...\nDone."),
    case("two analysis messages joined", CH + "analysis" + MS + "a" + EN + ST + "assistant" + CH + "analysis" + MS
         + "b" + EN + ST + "assistant" + CH + "final" + MS + "c" + RE, reasoning="a\nb", content="c"),
    case("truncated final", CH + "final" + MS + "Partial ans", content="Partial ans"),
    case("truncated analysis", CH + "analysis" + MS + "Still thinking", reasoning="Still thinking"),
    case("truncated call keeps what was sent", CH + "commentary to=functions.f " + CO + "json" + MS + '{"a": [1, 2',
         calls=[("f", '{"a": [1, 2')], finish="tool_calls", req=TOOLS,
         note="deviation: vLLM lists only completed Harmony calls"),
    case("invalid JSON arguments kept raw", CH + "commentary to=functions.f" + MS + "not json" + CA,
         calls=[("f", "not json")], finish="tool_calls", req=TOOLS),
    case("non-JSON content type is raw", CH + "commentary to=functions.f " + CO + "text" + MS + '{"a":1}' + CA,
         calls=[("f", '{"a":1}')], finish="tool_calls", req=TOOLS),
    case("built-in tool message dropped", CH + "analysis to=browser.search" + MS + '{"query":"x"}' + CA,
         req=TOOLS),
    case("function call without tools dropped", CH + "commentary to=functions.f" + MS + '{"a":1}' + CA + ST
         + "assistant" + CH + "final" + MS + "ok" + RE, content="ok"),
    case("plain text is content", "Just text.", content="Just text."),
    case("a header inside a body ends the message", CH + "analysis" + MS + "think" + ST + "assistant" + CH + "final"
         + MS + "answer" + RE, reasoning="think", content="answer"),
    case("number cut short by the call marker", CH + "commentary to=functions.f" + MS + "42" + CA,
         calls=[("f", "42")], finish="tool_calls", req=TOOLS),
]}

# ---------------------------------------------------------------- tool_choice named / required (hermes parser)
choice = {"reasoning": "qwen3", "tool": "hermes", "cases": [
    case("named tool choice", '{"city": "Paris"}', content="", calls=[("get_weather", '{"city": "Paris"}')],
         req={"tools": True, "named_tool": "get_weather", "reasoning_ended": True},
         note="arguments verbatim; content \"\"; finish stays stop"),
    case("named tool choice after reasoning", "hmm</think>\n{\"a\": 1}", reasoning="hmm", content="",
         calls=[("f", '\n{"a": 1}')], req={"tools": True, "named_tool": "f"}),
    case("named, whitespace only", "  \n", content="", req={"tools": True, "named_tool": "f", "reasoning_ended": True}),
    case("required", '[{"name": "a", "parameters": {"x": "' + U + '"}}, {"name": "b", "parameters": {}}]',
         content="", calls=[("a", '{"x": "' + U + '"}'), ("b", "{}")], finish="tool_calls",
         req={"tools": True, "tool_choice": "required", "reasoning_ended": True}),
]}

# ---------------------------------------------------------------- marker reasoning parsers
# The rules of vllm/reasoning/: basic_parsers.py (BaseThinkingReasoningParser) and the parsers
# on it. NOTHINK is a request whose chat_template_kwargs turn thinking off, THINK on.
THINK = {"thinking": "on"}
NOTHINK = {"thinking": "off"}
UNI = "\u65e5\u672c\u8a9e \U0001f600"


def think_cases(start, end, inside=True, drop_start=True):
    """The cases every marker parser shares, for its markers."""
    out = [
        case("reasoning then content", start + "\nplan " + UNI + "\n" + end + "\n\nAnswer.",
             reasoning="\nplan " + UNI + "\n", content="\n\nAnswer."),
        case("no end marker: truncated reasoning", start + "still thinking",
             reasoning="still thinking") if inside else
        case("no end marker: truncated reasoning", start + "still thinking", reasoning="still thinking"),
        case("partial end marker at the end", start + "a" + end[:-1],
             reasoning="a" + end[:-1]),
        case("end marker only once", start + "a" + end + "b" + end + "c", reasoning="a", content="b" + end + "c"),
        case("prompt ended reasoning", "x" + start + "y" + end + "z", content="x" + start + "y" + end + "z",
             req={"reasoning_ended": True}),
    ]
    if inside:
        out.append(case("start marker opened in the prompt", "thoughts" + end + "done",
                        reasoning="thoughts", content="done"))
    if inside and drop_start:
        out.append(case("start markers inside reasoning dropped", "a" + start + "b" + start + end + "c",
                        reasoning="ab", content="c"))
    return out


# granite (vllm/reasoning/granite_reasoning_parser.py): plain-text markers, each in two spellings.
# The first cases are the examples of vLLM's tests/reasoning/test_granite_reasoning_parser.py;
# where its two paths differ the streaming one is followed (noted per case).
GS, GS2 = "Here is my thought process:", "Here's my thought process:"
GR, GR2 = "Here is my response:", "Here's my response:"


def granite_think_cases():
    return [
        case("simple reasoning", GS + "This is a reasoning section" + GR + "This is the rest",
             reasoning="This is a reasoning section", content="This is the rest"),
        case("complete reasoning, no response", GS + "This is a reasoning section" + GR,
             reasoning="This is a reasoning section"),
        case("no reasoning", "This is content", content="This is content"),
        case("multiple lines", GS + "This\nThat" + GR + "This is the rest\nThat", reasoning="This\nThat",
             content="This is the rest\nThat"),
        case("spaces around the markers kept", GS + " foo " + GR + " bar", reasoning=" foo ", content=" bar"),
        case("Here's spellings", GS2 + " a " + UNI + " " + GR2 + " b", reasoning=" a " + UNI + " ", content=" b"),
        case("mixed spellings", GS2 + "a" + GR + "b", reasoning="a", content="b"),
        case("no response marker: truncated reasoning", GS + " still thinking", reasoning=" still thinking",
             note="streaming path; vLLM's non-streaming regex makes it all content"),
        case("text before the start marker: all content", "Hi " + GS + " a " + GR + " b",
             content="Hi " + GS + " a " + GR + " b",
             note="streaming path (the marker must open the output); vLLM's non-streaming regex searches anywhere"),
        case("broken start marker is content", "Here is my thought failure", content="Here is my thought failure"),
        case("partial start marker at the end is content", "Here is my", content="Here is my",
             note="vLLM's streaming path never sends it"),
        case("start marker only", GS, note="nothing after the marker: reasoning and content null"),
        case("broken response marker stays reasoning", GS + " foo Here was" + GR + "x", reasoning=" foo Here was",
             content="x"),
        case("partial response marker at the end", GS + "a Here is my resp", reasoning="a Here is my resp"),
        case("start marker inside reasoning is text", GS + "a" + GS + "b" + GR + "c", reasoning="a" + GS + "b",
             content="c"),
        case("response marker only once", GS + "a" + GR + "b" + GR + "c", reasoning="a", content="b" + GR + "c"),
        case("empty reasoning", GS + GR + "c", content="c"),
        case("prompt ended reasoning", GS + "a" + GR + "b", content=GS + "a" + GR + "b",
             req={"reasoning_ended": True}),
    ]


reasoning_files = {
    "r_glm45": {"reasoning": "glm45", "tool": "", "cases": think_cases("<think>", "</think>")},
    "r_glm47": {"reasoning": "glm47", "tool": "", "cases": think_cases("<think>", "</think>")},
    "r_minimax_m2": {"reasoning": "minimax_m2", "tool": "", "cases": think_cases("<think>", "</think>")},
    "r_seed_oss": {"reasoning": "seed_oss", "tool": "", "cases": think_cases("<seed:think>", "</seed:think>") + [
        case("<think> is not seed's marker", "<think>a</think>b", reasoning="<think>a</think>b")]},
    "r_step3": {"reasoning": "step3", "tool": "", "cases": think_cases("", "</think>", drop_start=False) + [
        case("<think> kept as reasoning text", "<think>a</think>b", reasoning="<think>a", content="b",
             note="step3_reasoning_parser looks only for </think>")]},
    "r_deepseek_v3": {"reasoning": "deepseek_v3", "tool": "", "cases": [
        case("thinking off by default: all content", "a</think>b", content="a</think>b",
             note="DeepSeekV3ReasoningParser: IdentityReasoningParser unless thinking/enable_thinking"),
        case("thinking off", "a</think>b", content="a</think>b", req=NOTHINK),
        case("thinking on: R1 rules", "a<think>b</think>c", reasoning="ab", content="c", req=THINK),
        case("thinking on, truncated", "plan " + UNI, reasoning="plan " + UNI, req=THINK),
    ]},
    "r_kimi_k2": {"reasoning": "kimi_k2", "tool": "", "cases": think_cases("<think>", "</think>") + [
        case("tool section ends reasoning implicitly",
             "plan<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
             reasoning="plan", content="<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"),
        case("partial section marker held", "plan<|tool_calls_sec", reasoning="plan<|tool_calls_sec"),
        case("thinking off: all content", "a</think>b", content="a</think>b", req=NOTHINK),
        case("thinking on", "a</think>b", reasoning="a", content="b", req=THINK),
    ]},
    "r_mistral": {"reasoning": "mistral", "tool": "", "cases": [
        case("reasoning then content", "[THINK]plan " + UNI + "[/THINK]Answer.", reasoning="plan " + UNI,
             content="Answer."),
        case("no [THINK]: all content", "Just an answer.", content="Just an answer."),
        case("text before [THINK] is content", "Hi[THINK]x[/THINK]y", reasoning="x", content="Hiy"),
        case("truncated reasoning", "[THINK]still", reasoning="still"),
        case("[/THINK] without [THINK] dropped", "a[/THINK]b", content="ab"),
        case("second [THINK] after the end is content", "[THINK]a[/THINK]b[THINK]c", reasoning="a",
             content="b[THINK]c"),
        case("partial marker at the end", "[THINK]a[/THI", reasoning="a[/THI"),
        case("prompt ended reasoning", "[THINK]a[/THINK]b", content="[THINK]a[/THINK]b",
             req={"reasoning_ended": True}),
    ]},
    "r_granite": {"reasoning": "granite", "tool": "", "cases": granite_think_cases()},
    "r_minimax_m2_append_think": {"reasoning": "minimax_m2_append_think", "tool": "", "cases": [
        case("reasoning kept in the content", "plan</think>Answer.", content="<think>plan</think>Answer.",
             note="MiniMaxM2AppendThinkReasoningParser: content is \"<think>\" + output"),
        case("empty output", "", content="<think>"),
        case("unicode", UNI, content="<think>" + UNI),
    ]},
}

# ---------------------------------------------------------------- qwen3_coder (+ qwen3 reasoning)
# Arguments are json.dumps(params, ensure_ascii=False) of the values converted as
# _convert_param_value does (qwen3coder_tool_parser.py); the converted values are written here
# by hand, json.dumps is the reference for the text.
WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
    "hourly": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "n": {"type": "integer"},
    "any": {"type": ["string", "null"]}}}}
XTOOLS = {"tools": True, "reasoning_ended": True, "schemas": [WEATHER, {"name": "f", "parameters": {}}]}


def xcall(name, *params):
    body = "".join("<parameter=" + k + ">\n" + v + "\n</parameter>\n" for k, v in params)
    return "<tool_call>\n<function=" + name + ">\n" + body + "</function>\n</tool_call>"


def xargs(d):
    return json.dumps(d, ensure_ascii=False)


qwen3_coder = {"reasoning": "qwen3", "tool": "qwen3_coder", "cases": [
    case("typed parameters", "I'll check.\n" + xcall("get_weather", ("city", "Par" + U + "s \u65e5\u672c"), ("days", "3"),
                                                       ("temp", "21.50"), ("hourly", "True"),
                                                       ("opts", '{"a": [1, 2.0], "b":"x"}'), ("tags", '["x","y"]')),
         content="I'll check.\n", calls=[("get_weather", xargs({"city": "Par" + U + "s \u65e5\u672c", "days": 3, "temp": 21.5,
                                                                  "hourly": True, "opts": {"a": [1, 2.0], "b": "x"},
                                                                  "tags": ["x", "y"]}))],
         finish="tool_calls", req=XTOOLS),
    case("two calls, the second without parameters", xcall("get_weather", ("city", "Oslo")) + "\n" + xcall("f"),
         calls=[("get_weather", xargs({"city": "Oslo"})), ("f", "{}")], finish="tool_calls", req=XTOOLS),
    case("multi-line string, one leading and one trailing newline removed",
         xcall("get_weather", ("city", 'line1\n"q" \\ \t\u0001\n')),
         calls=[("get_weather", xargs({"city": 'line1\n"q" \\ \t\u0001\n'}))], finish="tool_calls", req=XTOOLS),
    case("parameters outside the schema and unknown functions are strings",
         xcall("get_weather", ("extra", "3")) + xcall("nope", ("x", "[1]")),
         calls=[("get_weather", xargs({"extra": "3"})), ("nope", xargs({"x": "[1]"}))], finish="tool_calls", req=XTOOLS),
    case("int and float conversions", xcall("get_weather", ("days", " 007 "), ("n", "1_000"), ("temp", "2.0")) +
         xcall("get_weather", ("days", "three"), ("temp", "1e3")) + xcall("get_weather", ("temp", "nan"), ("n", "-0")),
         calls=[("get_weather", xargs({"days": 7, "n": 1000, "temp": 2})),
                ("get_weather", xargs({"days": "three", "temp": 1000})),
                ("get_weather", xargs({"temp": "nan", "n": 0}))], finish="tool_calls", req=XTOOLS,
         note="float() without a fraction is written as an int; nan stays a string (vLLM's int(nan) raises)"),
    case("null values", xcall("get_weather", ("note", "None"), ("city", "null"), ("days", "NULL")),
         calls=[("get_weather", xargs({"note": None, "city": "null", "days": None}))], finish="tool_calls", req=XTOOLS),
    case("booleans", xcall("get_weather", ("hourly", "FALSE")) + xcall("get_weather", ("hourly", "yes")),
         calls=[("get_weather", xargs({"hourly": False})), ("get_weather", xargs({"hourly": False}))],
         finish="tool_calls", req=XTOOLS),
    case("container that is not JSON is a string", xcall("get_weather", ("opts", "not json"), ("tags", "[1,")),
         calls=[("get_weather", xargs({"opts": "not json", "tags": "[1,"}))], finish="tool_calls", req=XTOOLS),
    case("a type list: literal values read, others strings", xcall("get_weather", ("any", "3"), ("any", "Paris")),
         calls=[("get_weather", '{"any": 3, "any": "Paris"}')], finish="tool_calls", req=XTOOLS,
         note="a duplicate parameter is sent twice, as streamed (json.dumps of the dict keeps the last)"),
    case("missing </parameter> ends at the next parameter", "<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n"
         "<parameter=city>\nRome\n</function>\n</tool_call>",
         calls=[("get_weather", xargs({"days": 1, "city": "Rome"}))], finish="tool_calls", req=XTOOLS),
    case("truncated inside a value keeps the call", "<tool_call>\n<function=get_weather>\n<parameter=city>\nBer",
         calls=[("get_weather", xargs({"city": "Ber"}))], finish="tool_calls", req=XTOOLS),
    case("truncated after a parameter", "<tool_call>\n<function=get_weather>\n<parameter=days>\n4\n</parameter>\n",
         calls=[("get_weather", xargs({"days": 4}))], finish="tool_calls", req=XTOOLS),
    case("truncated in the header is content", "Hi<tool_call>\n<function=get_w", content="Hi<tool_call>\n<function=get_w",
         req=XTOOLS),
    case("hermes JSON is not this format: content", '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
         content='<tool_call>{"name": "f", "arguments": {}}</tool_call>', req=XTOOLS),
    case("text after a call is content", xcall("f") + "\n\nDone.", content="Done.", calls=[("f", "{}")],
         finish="tool_calls", req=XTOOLS),
    case("qwen3 implicit end of reasoning", "plan<tool_call>\n<function=f>\n</function>\n</tool_call>",
         reasoning="plan", calls=[("f", "{}")], finish="tool_calls",
         req={"tools": True, "schemas": XTOOLS["schemas"]}),
    case("tool_choice none: markers are content", xcall("f"), content=xcall("f"),
         req={"tools": True, "tool_choice": "none", "reasoning_ended": True}),
]}
qwen3_xml = dict(qwen3_coder, tool="qwen3_xml")



def seedify(c):
    """A qwen3_coder case in seed_oss's wrapper and reasoning markers."""
    c = json.loads(json.dumps(c))
    def sub(x):
        return None if x is None else x.replace("<tool_call>", "<seed:tool_call>").replace(
            "</tool_call>", "</seed:tool_call>").replace("<think>", "<seed:think>").replace("</think>", "</seed:think>")
    c["text"] = sub(c["text"])
    c["want"]["content"] = sub(c["want"]["content"])
    c["want"]["reasoning"] = sub(c["want"]["reasoning"])
    return c


seed_oss = {"reasoning": "seed_oss", "tool": "seed_oss", "cases": [
    seedify(c) for c in qwen3_coder["cases"] if c["name"] not in ("qwen3 implicit end of reasoning", "null values")] + [
    case("null values", xcall("get_weather", ("note", "None"), ("city", "null"), ("days", "NULL"), ("extra", "Null"))
         .replace("tool_call>", "seed:tool_call>"),
         calls=[("get_weather", xargs({"note": "None", "city": None, "days": None, "extra": None}))], finish="tool_calls",
         req=XTOOLS, note="seed_oss: \"null\" in any case is null for every parameter; anyOf is not read"),
    case("reasoning then a call", "<seed:think>plan</seed:think>" + xcall("f").replace("tool_call>", "seed:tool_call>"),
         reasoning="plan", calls=[("f", "{}")], finish="tool_calls", req={"tools": True, "schemas": XTOOLS["schemas"]}),
    case("a Qwen wrapper is content", xcall("f"), content=xcall("f"), req=XTOOLS),
]}

# ---------------------------------------------------------------- glm45 / glm47 (+ glm45 reasoning)
# Glm4MoeModelToolParser: a parameter typed exactly "string" is its raw text; any other is
# json.loads(text.strip()), else the stripped text. Arguments json.dumps(..., ensure_ascii=False).
GTOOLS = {"tools": True, "reasoning_ended": True, "schemas": [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}}}]}


def gcall(name, *pairs, nl=True):
    sep = "\n" if nl else ""
    return "<tool_call>" + name + sep + "".join(
        "<arg_key>" + k + "</arg_key>" + sep + "<arg_value>" + v + "</arg_value>" + sep for k, v in pairs) + "</tool_call>"


def glm_cases():
    return [
        case("one call", "Let me check.\n" + gcall("get_weather", ("city", " Par" + U + "s\n"), ("days", " 3 ")),
             content="Let me check.\n", calls=[("get_weather", xargs({"city": " Par" + U + "s\n", "days": 3}))],
             finish="tool_calls", req=GTOOLS, note="a string parameter keeps its whitespace"),
        case("GLM-4.7 layout", gcall("get_weather", ("city", "Oslo"), ("opts", '{"a": [1, 2.50]}'), nl=False),
             calls=[("get_weather", xargs({"city": "Oslo", "opts": {"a": [1, 2.5]}}))], finish="tool_calls", req=GTOOLS),
        case("two calls, text between is content", gcall("get_weather", ("city", "A")) + "\n" + gcall("f"),
             content="\n", calls=[("get_weather", xargs({"city": "A"})), ("f", "{}")], finish="tool_calls", req=GTOOLS,
             note="vLLM's streaming path sends all text outside calls"),
        case("untyped values: JSON else stripped text", gcall("f", ("a", " true "), ("b", "[1, {\"x\": null}]"),
                                                              ("c", " hello world "), ("d", "\u65e5\u672c")),
             calls=[("f", xargs({"a": True, "b": [1, {"x": None}], "c": "hello world", "d": "\u65e5\u672c"}))],
             finish="tool_calls", req=GTOOLS),
        case("a typed int that is not JSON is a string", gcall("get_weather", ("days", "three")),
             calls=[("get_weather", xargs({"days": "three"}))], finish="tool_calls", req=GTOOLS),
        case("a key without a value is dropped", gcall("f", ("a", "1")).replace("<arg_value>1</arg_value>", "x"),
             calls=[("f", "{}")], finish="tool_calls", req=GTOOLS),
        case("truncated inside a value keeps the call", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ber",
             calls=[("get_weather", xargs({"city": "Ber"}))], finish="tool_calls", req=GTOOLS,
             note="deviation: closed here; vLLM streaming leaves the JSON open, non-streaming makes it content"),
        case("truncated in the name is content", "Hi<tool_call>get_wea", content="Hi<tool_call>get_wea", req=GTOOLS),
        case("empty name is content", "<tool_call>\n</tool_call>", content="<tool_call>\n</tool_call>", req=GTOOLS),
        case("tool_choice none: markers are content", gcall("f"), content=gcall("f"),
             req={"tools": True, "tool_choice": "none", "reasoning_ended": True}),
        case("reasoning then a call", "<think>plan</think>" + gcall("f", ("q", "1")), reasoning="plan",
             calls=[("f", xargs({"q": 1}))], finish="tool_calls", req={"tools": True, "schemas": GTOOLS["schemas"]}),
    ]


glm45 = {"reasoning": "glm45", "tool": "glm45", "cases": glm_cases()}
glm47 = {"reasoning": "glm47", "tool": "glm47", "cases": glm_cases()}

# ---------------------------------------------------------------- kimi_k2 (+ kimi_k2 reasoning)
KS, KE, KB, KA, KC = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                      "<|tool_call_argument_begin|>", "<|tool_call_end|>")
KARGS = '{"city": "Par' + U + 's", "n": [1, 2.50]}'
kimi_k2 = {"reasoning": "kimi_k2", "tool": "kimi_k2", "cases": [
    case("reasoning, then one call", "plan</think>Checking." + KS + KB + "functions.get_weather:0" + KA + KARGS + KC + KE,
         reasoning="plan", content="Checking.", calls=[("get_weather", KARGS)], finish="tool_calls", req=TOOLS,
         note="arguments raw, as kimi_k2_tool_parser sends them; the id is the header"),
    case("implicit end of reasoning at the section", "plan" + KS + KB + "functions.f:0" + KA + "{}" + KC + KE,
         reasoning="plan", calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("two calls, whitespace dropped", "</think>" + KS + "\n" + KB + " functions.a:0 " + KA + " \n{\"x\": 1}\n " + KC + "\n" +
         KB + "b:1" + KA + "[]" + KC + "\n" + KE + "\n",
         calls=[("a", '{"x": 1}'), ("b", "[]")], finish="tool_calls", req=TOOLS,
         note="whitespace around the header and the arguments is removed (the regex's \\s*)"),
    case("inner whitespace kept", "</think>" + KS + KB + "functions.f:0" + KA + '{"a":  1,\n "b": 2}' + KC + KE,
         calls=[("f", '{"a":  1,\n "b": 2}')], finish="tool_calls", req=TOOLS),
    case("header without an index is content", "</think>" + KS + KB + "functions.f" + KA + "{}" + KC + KE,
         content=KB + "functions.f" + KA + "{}" + KC + KE, finish="stop", req=TOOLS,
         note="the section's opening marker is consumed; the rest of a malformed call is content"),
    case("truncated header is content", "</think>" + KS + KB + "functions.get_w", content=KB + "functions.get_w", req=TOOLS),
    case("truncated arguments keep the call", "</think>" + KS + KB + "functions.f:0" + KA + '{"a": "b',
         calls=[("f", '{"a": "b')], finish="tool_calls", req=TOOLS),
    case("text after the section is content", "</think>" + KS + KB + "functions.f:0" + KA + "{}" + KC + KE + " Done.",
         content="Done.", calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("tool_choice none: markers are content", "</think>" + KS + "x", content=KS + "x",
         req={"tools": True, "tool_choice": "none"}),
]}

# ---------------------------------------------------------------- deepseek_v31 (+ deepseek_v3 reasoning)
DS_CB, DS_CE, DS_B, DS_E, DS_S = ("<\uff5ctool\u2581calls\u2581begin\uff5c>", "<\uff5ctool\u2581calls\u2581end\uff5c>",
                                  "<\uff5ctool\u2581call\u2581begin\uff5c>", "<\uff5ctool\u2581call\u2581end\uff5c>",
                                  "<\uff5ctool\u2581sep\uff5c>")
V31ARGS = '{"city": "\u5317\u4eac", "days": 3}'
deepseek_v31 = {"reasoning": "deepseek_v3", "tool": "deepseek_v31", "cases": [
    case("one call", "Sure." + DS_CB + DS_B + "get_weather" + DS_S + V31ARGS + DS_E + DS_CE,
         content="Sure.", calls=[("get_weather", V31ARGS)], finish="tool_calls", req=TOOLS),
    case("thinking on, then two calls", "plan</think>" + DS_CB + DS_B + "a" + DS_S + "{}" + DS_E + "\n" + DS_B + "b" + DS_S +
         '{"x": [1,2]}' + DS_E + DS_CE, reasoning="plan", calls=[("a", "{}"), ("b", '{"x": [1,2]}')],
         finish="tool_calls", req={"tools": True, "thinking": "on"}),
    case("arguments verbatim, whitespace kept", DS_CB + DS_B + "f" + DS_S + ' {"a":1} ' + DS_E + DS_CE,
         calls=[("f", ' {"a":1} ')], finish="tool_calls", req=TOOLS),
    case("empty name is content", DS_CB + DS_B + DS_S + "{}" + DS_E + DS_CE, content=DS_B + DS_S + "{}" + DS_E + DS_CE,
         req=TOOLS),
    case("truncated arguments keep the call", DS_CB + DS_B + "f" + DS_S + '{"a": ', calls=[("f", '{"a": ')],
         finish="tool_calls", req=TOOLS),
    case("truncated header is content", "Hi" + DS_CB + DS_B + "get_", content="Hi" + DS_B + "get_", req=TOOLS),
    case("a V3 fenced call is not this format", DS_CB + DS_B + "function" + DS_S + "f\n```json\n{}\n```" + DS_E + DS_CE,
         calls=[("function", "f\n```json\n{}\n```")], finish="tool_calls", req=TOOLS,
         note="deepseek_v31 reads the text after the separator as the arguments"),
]}

# ---------------------------------------------------------------- minimax_m2 (+ minimax_m2 reasoning)
# _convert_param_value_with_types: null/none/nil -> null; then integer > number > boolean >
# object/array > string, the first that reads the value; else json.loads, else the string.
MTOOLS = {"tools": True, "reasoning_ended": True, "schemas": [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
        "hourly": {"type": "boolean"}, "opts": {"type": "object"}, "either": {"type": ["string", "integer"]},
        "mode": {"enum": [1, "x"]}, "maybe": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}}}}]}


def minvoke(name, *params):
    return '<invoke name="' + name + '">\n' + "".join(
        '<parameter name="' + k + '">' + v + "</parameter>\n" for k, v in params) + "</invoke>\n"


def mblock(*invokes):
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


minimax_m2 = {"reasoning": "minimax_m2", "tool": "minimax_m2", "cases": [
    case("typed parameters", "</think>Checking.\n" + mblock(minvoke("get_weather", ("city", " Par" + U + "s "), ("days", "3"),
                                                                     ("temp", "2.50"), ("hourly", "yes"), ("opts", '{"a": [1]}'))),
         content="Checking.\n", calls=[("get_weather", xargs({"city": "Par" + U + "s", "days": 3, "temp": 2.5, "hourly": True,
                                                               "opts": {"a": [1]}}))], finish="tool_calls",
         req={"tools": True, "schemas": MTOOLS["schemas"]}, note="values are stripped"),
    case("two invokes in one block", mblock(minvoke("get_weather", ("city", "A")), minvoke("f")),
         calls=[("get_weather", xargs({"city": "A"})), ("f", "{}")], finish="tool_calls", req=MTOOLS),
    case("type priority and fallbacks", mblock(minvoke("get_weather", ("either", "7"), ("mode", "x"), ("maybe", "NIL"),
                                                       ("days", "many"), ("extra", "[1, 2]"), ("hourly", "maybe"))),
         calls=[("get_weather", xargs({"either": 7, "mode": "x", "maybe": None, "days": "many", "extra": "[1, 2]",
                                       "hourly": "maybe"}))], finish="tool_calls", req=MTOOLS,
         note="integer before string; enum values give the types; a parameter outside the schema is a string"),
    case("duplicate parameter replaces in place", mblock(minvoke("f", ("a", "1"), ("b", "2"), ("a", "3"))),
         calls=[("f", xargs({"a": "3", "b": "2"}))], finish="tool_calls", req=MTOOLS),
    case("single-quoted and bare names", mblock("<invoke name='f'>\n<parameter name=q>x</parameter>\n</invoke>"),
         calls=[("f", xargs({"q": "x"}))], finish="tool_calls", req=MTOOLS),
    case("unterminated invoke is content", "Hi" + "<minimax:tool_call>\n" + minvoke("f", ("a", "1"))[:-12],
         content="Hi" + minvoke("f", ("a", "1"))[:-12], req=MTOOLS,
         note="vLLM's streaming path sends an invoke only once it is complete"),
    case("text after the block is content", mblock(minvoke("f")) + "\nDone.", content="\nDone.", calls=[("f", "{}")],
         finish="tool_calls", req=MTOOLS),
    case("invoke without a name is content", mblock('<invoke name=>\n</invoke>\n'),
         content='<invoke name=>\n</invoke>', req=MTOOLS),
    case("tool_choice none: markers are content", mblock(minvoke("f")), content=mblock(minvoke("f")),
         req={"tools": True, "tool_choice": "none", "reasoning_ended": True}),
]}

# ---------------------------------------------------------------- granite
GARGS = '{"city": "Par' + U + 's", "t": 1.50, "deep": {"a": [1E2, null]}}'
granite = {"reasoning": "", "tool": "granite", "cases": [
    case("one call after <|tool_call|>", '<|tool_call|>[{"name": "get_weather", "arguments": ' + GARGS + '}]',
         calls=[("get_weather", dumps(GARGS))], finish="tool_calls", req=TOOLS),
    case("two calls, no marker, leading whitespace", '\n [{"name": "a", "arguments": {}}, {"arguments": {"x": "y"}, "name": "b"}]',
         calls=[("a", "{}"), ("b", '{"x": "y"}')], finish="tool_calls", req=TOOLS),
    case("<tool_call> prefix", '<tool_call> [{"name": "f", "arguments": [1,2]}]', calls=[("f", "[1, 2]")],
         finish="tool_calls", req=TOOLS),
    case("plain content", "The answer is 42.", content="The answer is 42.", req=TOOLS),
    case("a marker then text is content", "<|tool_call|>sorry", content="<|tool_call|>sorry", req=TOOLS),
    case("text after the array is content", '[{"name": "f", "arguments": {}}] Done.', content="Done.",
         calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("truncated inside arguments keeps the call", '[{"name": "f", "arguments": {"a": "b',
         calls=[("f", '{"a": "b')], finish="tool_calls", req=TOOLS),
    case("truncated before the name is content", '<|tool_call|>[{"na', content='<|tool_call|>[{"na', req=TOOLS),
    case("tool_choice none: all content", '[{"name": "f", "arguments": {}}]', content='[{"name": "f", "arguments": {}}]',
         req={"tools": True, "tool_choice": "none"}),
]}

# ---------------------------------------------------------------- step3
# vllm/tool_parsers/step3_tool_parser.py, its streaming path. The outputs are the examples of
# vLLM's tests/tool_parsers/test_step3_tool_parser.py; arguments are json.dumps(params,
# ensure_ascii=False) of the stripped values cast as _cast_arguments casts them.
S3B, S3E = "<\uff5ctool_calls_begin\uff5c>", "<\uff5ctool_calls_end\uff5c>"
S3CB, S3CE, S3SEP = "<\uff5ctool_call_begin\uff5c>", "<\uff5ctool_call_end\uff5c>", "<\uff5ctool_sep\uff5c>"


def s3call(name, *params, sep=False):
    return (S3CB + ("function" + S3SEP if sep else "") + '<steptml:invoke name="' + name + '">' +
            "".join('<steptml:parameter name="' + k + '">' + v + "</steptml:parameter>" for k, v in params) +
            "</steptml:invoke>" + S3CE)


S3TYPES = {"name": "test_function", "parameters": {"type": "object", "properties": {
    "string_field": {"type": "string"}, "int_field": {"type": "integer"}, "float_field": {"type": "number"},
    "bool_field": {"type": "boolean"}, "null_field": {"type": "null"}, "array_field": {"type": "array"},
    "object_field": {"type": "object"}, "whole": {"type": "number"}, "bad_int": {"type": "integer"},
    "inf": {"type": "number"}, "maybe": {"type": "boolean"}}}}
S3TOOLS = {"tools": True, "schemas": [S3TYPES]}
step3 = {"reasoning": "step3", "tool": "step3", "cases": [
    case("no tool calls", "</think>This is a regular response without any tool calls.",
         content="This is a regular response without any tool calls.", req=TOOLS),
    case("single call", "plan</think>" + S3B + s3call("get_weather", ("city", "Tokyo")) + S3E, reasoning="plan",
         calls=[("get_weather", json.dumps({"city": "Tokyo"}))], finish="tool_calls", req=TOOLS),
    case("parallel calls", "</think>" + S3B + s3call("get_weather", ("city", "Tokyo")) + S3SEP +
         s3call("get_time", ("timezone", "Asia/Tokyo")) + S3E,
         calls=[("get_weather", json.dumps({"city": "Tokyo"})), ("get_time", json.dumps({"timezone": "Asia/Tokyo"}))],
         finish="tool_calls", req=TOOLS, note="the <｜tool_sep｜> between calls is dropped (vLLM's streaming path stalls there)"),
    case("various data types", "</think>" + S3B + s3call("test_function", ("string_field", " hello "), ("int_field", "42"),
         ("float_field", "3.14"), ("bool_field", "TRUE"), ("null_field", "null"), ("array_field", '["a", "b", "c"]'),
         ("object_field", '{"nested": "value"}'), ("whole", "3"), ("bad_int", "4.5"), ("inf", "inf"), ("maybe", "yes")) + S3E,
         calls=[("test_function", json.dumps({"string_field": "hello", "int_field": 42, "float_field": 3.14,
                                              "bool_field": True, "null_field": None, "array_field": '["a", "b", "c"]',
                                              "object_field": '{"nested": "value"}', "whole": 3.0, "bad_int": "4.5",
                                              "inf": "inf", "maybe": "yes"}, ensure_ascii=False))],
         finish="tool_calls", req=S3TOOLS, note="arrays and objects stay strings; float('inf') kept as the string"),
    case("empty arguments", "</think>" + S3B + S3CB + '<steptml:invoke name="refresh"></steptml:invoke>' + S3CE + S3E,
         calls=[("refresh", "{}")], finish="tool_calls", req=TOOLS,
         note="vLLM's streaming path sends no arguments for it"),
    case("surrounding text", "</think>Let me check the weather for you.\n\n" + S3B + s3call("get_weather", ("city", "Tokyo")) +
         S3E + "\n\nI'll get that information.", content="Let me check the weather for you.\n\n\n\nI'll get that information.",
         calls=[("get_weather", json.dumps({"city": "Tokyo"}))], finish="tool_calls", req=TOOLS),
    case("escaped strings and unicode", "</think>" + S3B + s3call("f", ("quoted", 'He said "hello"'), ("path", "C:\\Users\\file.txt"),
         ("newline", "line1\nline2"), ("u", "\u3000" + UNI + "\xa0")) + S3E,
         calls=[("f", json.dumps({"quoted": 'He said "hello"', "path": "C:\\Users\\file.txt", "newline": "line1\nline2",
                                  "u": UNI}, ensure_ascii=False))], finish="tool_calls", req=TOOLS,
         note="str.strip() removes Unicode whitespace"),
    case("type and separator prefix, text between calls dropped", "</think>" + S3B + "\n" + s3call("a", ("x", "1"), sep=True) + "\n junk " +
         s3call("b", sep=True) + "\n" + S3E, calls=[("a", json.dumps({"x": "1"})), ("b", "{}")], finish="tool_calls", req=TOOLS),
    case("duplicate parameter replaces in place", "</think>" + S3B + s3call("f", ("a", "1"), ("b", "2"), ("a", "3")) + S3E,
         calls=[("f", json.dumps({"a": "3", "b": "2"}))], finish="tool_calls", req=TOOLS),
    case("a value with < is not a parameter", "</think>" + S3B + s3call("f", ("a", "x<y"), ("b", "ok")) + S3E,
         calls=[("f", json.dumps({"b": "ok"}))], finish="tool_calls", req=TOOLS),
    case("malformed header: call is content", "</think>" + S3B + S3CB + '<steptml:invoke name="">' + S3CE + S3E,
         content=S3CB + '<steptml:invoke name="">', req=TOOLS),
    case("unterminated call keeps its complete parameters", "</think>" + S3B + S3CB + '<steptml:invoke name="func">'
         '<steptml:parameter name="a">1</steptml:parameter><steptml:parameter name="b">2',
         calls=[("func", json.dumps({"a": "1"}))], finish="tool_calls", req=TOOLS,
         note="vLLM's malformed example: its streaming path sends the name only"),
    case("call cut before its header is content", "</think>x" + S3B + S3CB + '<steptml:inv',
         content="x" + S3CB + '<steptml:inv', req=TOOLS),
    case("second block after the end is content", "</think>" + S3B + s3call("f") + S3E + S3B + s3call("g") + S3E,
         content=S3B + s3call("g") + S3E, calls=[("f", "{}")], finish="tool_calls", req=TOOLS),
    case("tool_choice none: markers are content", "</think>" + S3B + s3call("f") + S3E, content=S3B + s3call("f") + S3E,
         req={"tools": True, "tool_choice": "none"}),
]}

# ---------------------------------------------------------------- deepseek_v32 (DSML)
# vllm/tool_parsers/deepseekv32_tool_parser.py, the streaming path of its classic parser: entries
# "{" / "," + json.dumps(key) + ":" + value, no spaces; string="true" values as JSON strings,
# object/array-typed values raw, others coerced by coerce_to_schema_type and json.dumps'd.
# The outputs are the examples of vLLM's tests/tool_parsers/test_deepseekv32_tool_parser.py.
FC, FCE = "<\uff5cDSML\uff5cfunction_calls>", "</\uff5cDSML\uff5cfunction_calls>"
INV, INVE = '<\uff5cDSML\uff5cinvoke name="', "</\uff5cDSML\uff5cinvoke>"
PAR, PARE = '<\uff5cDSML\uff5cparameter name="', "</\uff5cDSML\uff5cparameter>"


def dsinv(name, *params):
    """An invoke; params are (key, value) with string="true" or (key, value, "false")."""
    return INV + name + '">\n' + "".join(
        PAR + p[0] + '" string="' + (p[2] if len(p) > 2 else "true") + '">' + p[1] + PARE + "\n" for p in params) + INVE + "\n"


def dsblock(*invokes):
    return FC + "\n" + "".join(invokes) + FCE


def dsargs(*entries):
    """Streamed arguments from (key, json text of the value) pairs."""
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + v for k, v in entries) + "}" if entries else "{}"


def js(v):
    return json.dumps(v, ensure_ascii=False)


def dstool(name, **props):
    return {"name": name, "parameters": {"type": "object", "properties": props}}


DSTOOLS = {"tools": True, "schemas": [
    dstool("toggle", enabled={"type": "boolean"}, count={"type": "integer"}),
    dstool("score", value={"type": "integer"}),
    dstool("set_timer", wait={"anyOf": [{"type": "object", "properties": {"type": {"const": "for"}}}, {"type": "object"}]},
           patches={"oneOf": [{"type": "array", "items": {"type": "object"}}, {"type": "null"}]}),
    dstool("get_weather", location={"type": "string"}, date={"type": "string"}),
    dstool("measure", ratio={"type": "number"}, whole={"type": "number"}, big={"type": "integer"}, inf={"type": "number"},
           maybe={"type": ["null", "boolean"]}, other={"type": "other"}),
    dstool("update", tags={"type": "array"}, meta={"type": "object"}),
]}
deepseek_v32 = {"reasoning": "deepseek_v3", "tool": "deepseek_v32", "cases": [
    case("no tool call", "just some text", content="just some text", req=DSTOOLS),
    case("single tool, no parameters", FC + "\n" + INV + 'get_time">\n' + INVE + "\n" + FCE, calls=[("get_time", "{}")],
         finish="tool_calls", req=DSTOOLS),
    case("single tool with parameters", dsblock(dsinv("get_weather", ("location", "SF"), ("date", "2024-01-16"))),
         calls=[("get_weather", dsargs(("location", js("SF")), ("date", js("2024-01-16"))))], finish="tool_calls", req=DSTOOLS),
    case("content before the call, thinking on", "plan</think>Sure, let me check! " + dsblock(dsinv("get_weather", ("location", "NYC"))),
         reasoning="plan", content="Sure, let me check! ", calls=[("get_weather", dsargs(("location", js("NYC"))))],
         finish="tool_calls", req=dict(DSTOOLS, thinking="on")),
    case("multiple tools, unicode", dsblock(dsinv("get_weather", ("location", "\u676d\u5dde")), dsinv("get_weather", ("location", "\u5317\u4eac"))),
         calls=[("get_weather", dsargs(("location", js("\u676d\u5dde")))), ("get_weather", dsargs(("location", js("\u5317\u4eac"))))],
         finish="tool_calls", req=DSTOOLS),
    case("type conversion", dsblock(dsinv("toggle", ("enabled", "true", "false"), ("count", "42", "false"))),
         calls=[("toggle", dsargs(("enabled", "true"), ("count", "42")))], finish="tool_calls", req=DSTOOLS),
    case("string=true stays a string", dsblock(dsinv("score", ("value", "42"))), calls=[("score", dsargs(("value", js("42"))))],
         finish="tool_calls", req=DSTOOLS, note="the classic parser; vLLM's newer engine parser coerces it by the schema"),
    case("composed schema: object raw, array-or-null coerced",
         dsblock(dsinv("set_timer", ("wait", '{"type":"for","minutes":2880}', "false"),
                       ("patches", '[{"op":"replace","path":"/schedule","value":"quiet"}]', "false"))),
         calls=[("set_timer", dsargs(("wait", '{"type":"for","minutes":2880}'),
                                     ("patches", js([{"op": "replace", "path": "/schedule", "value": "quiet"}]))))],
         finish="tool_calls", req=DSTOOLS),
    case("arguments wrapper repaired", dsblock(dsinv("get_weather", ("arguments", '{"location":"Beijing"}', "false"))),
         calls=[("get_weather", dsargs(("location", js("Beijing"))))], finish="tool_calls", req=DSTOOLS),
    case("input wrapper repaired", dsblock(dsinv("get_weather", ("input", '{"location":"Beijing"}'))),
         calls=[("get_weather", dsargs(("location", js("Beijing"))))], finish="tool_calls", req=DSTOOLS),
    case("wrapper with unlisted keys kept", dsblock(dsinv("get_weather", ("input", '{"city":"Beijing"}'))),
         calls=[("get_weather", dsargs(("input", js('{"city":"Beijing"}'))))], finish="tool_calls", req=DSTOOLS),
    case("object and array parameters", dsblock(dsinv("update", ("tags", '["a", "b"]', "false"), ("meta", '{"k": 1}', "false"))),
         calls=[("update", dsargs(("tags", '["a", "b"]'), ("meta", '{"k": 1}')))], finish="tool_calls", req=DSTOOLS),
    case("numbers and fallbacks", dsblock(dsinv("measure", ("ratio", "3.14", "false"), ("whole", "2.0", "false"), ("big", "1_000", "false"),
                                                ("inf", "inf", "false"), ("maybe", "NULL", "false"), ("other", '{"x": 1.50}', "false"),
                                                ("unlisted", "7", "false"))),
         calls=[("measure", dsargs(("ratio", "3.14"), ("whole", "2"), ("big", "1000"), ("inf", js("inf")), ("maybe", "null"),
                                   ("other", js({"x": 1.5})), ("unlisted", js("7"))))], finish="tool_calls", req=DSTOOLS,
         note="a float that is not finite stays a string; an unknown type reads JSON; an unlisted parameter is a string"),
    case("escapes in a string value", dsblock(dsinv("get_weather", ("location", 'He said "hi"\n\\ \t\u00e9'))),
         calls=[("get_weather", dsargs(("location", js('He said "hi"\n\\ \t\u00e9'))))], finish="tool_calls", req=DSTOOLS),
    case("text after the block, then a second block", dsblock(dsinv("f")) + " and " + dsblock(dsinv("g")) + " done",
         content=" and  done", calls=[("f", "{}"), ("g", "{}")], finish="tool_calls", req=DSTOOLS),
    case("malformed tags and other text in the block are dropped",
         FC + "\njunk " + INV + '">' + INV + 'f">' + PAR + 'a" string="maybe">x' + PARE + PAR + 'b" string="true">y' + PARE + INVE + FCE,
         calls=[("f", dsargs(("b", js("y"))))], finish="tool_calls", req=DSTOOLS,
         note="vLLM's streaming path stops reading at the first of them"),
    case("missing invoke end closed by the block end", FC + INV + 'f">' + PAR + 'a" string="true">1' + PARE + FCE + "after",
         content="after", calls=[("f", dsargs(("a", js("1"))))], finish="tool_calls", req=DSTOOLS),
    case("truncated inside a string value", FC + INV + 'f">' + PAR + 'a" string="true">abc\u00e9',
         calls=[("f", dsargs(("a", js("abc\u00e9"))))], finish="tool_calls", req=DSTOOLS,
         note="cut off by the end of output: the value and the call are closed"),
    case("truncated inside a tag", "x" + FC + INV + 'f">' + PAR + 'a" stri', content="x", calls=[("f", "{}")],
         finish="tool_calls", req=DSTOOLS),
    case("raw object value is sent as written", dsblock(dsinv("update", ("meta", '{"a": 1', "false"))),
         calls=[("update", '{"meta":{"a": 1}')], finish="tool_calls", req=DSTOOLS,
         note="vLLM streams object/array values raw, so a malformed one stays malformed"),
    case("tool_choice none: markers are content", dsblock(dsinv("f")), content=dsblock(dsinv("f")),
         req={"tools": True, "tool_choice": "none"}),
    # The later classic parser's recovery (its _process_content_buffer): invokes outside a block
    # naming a request's tool, and other models' <｜DSML｜tool_calls> blocks as content.
    case("orphan invoke with a stray block end", "Let me check. " + dsinv("get_weather", ("location", "Paris")) + FCE + " Done.",
         content="Let me check.  Done.", calls=[("get_weather", dsargs(("location", js("Paris"))))], finish="tool_calls", req=DSTOOLS),
    case("orphan invoke then text", dsinv("get_weather", ("location", "Paris"))[:-1] + "\n Thanks",
         content="\n Thanks", calls=[("get_weather", dsargs(("location", js("Paris"))))], finish="tool_calls", req=DSTOOLS),
    case("two orphan invokes, whitespace dropped", dsinv("score", ("value", "1", "false")) + "\n" + dsinv("score", ("value", "2", "false")) + "\n",
         calls=[("score", dsargs(("value", "1"))), ("score", dsargs(("value", "2")))], finish="tool_calls", req=DSTOOLS),
    case("orphan invoke of an unknown tool is content", "x " + dsinv("nope"), content="x " + dsinv("nope"), req=DSTOOLS),
    case("orphan invokes need the request's tools", dsinv("f"), content=dsinv("f"), req=TOOLS),
    case("a block starting inside an orphan name", INV + "get_" + dsblock(dsinv("score")), content=INV + "get_",
         calls=[("score", "{}")], finish="tool_calls", req=DSTOOLS),
    case("another model's block is content", "<\uff5cDSML\uff5ctool_calls>" + dsinv("score") + "</\uff5cDSML\uff5ctool_calls>ok",
         content="<\uff5cDSML\uff5ctool_calls>" + dsinv("score") + "</\uff5cDSML\uff5ctool_calls>ok", req=DSTOOLS),
    case("a DSML block inside another model's block", "<\uff5cDSML\uff5ctool_calls>a" + dsblock(dsinv("score")),
         content="<\uff5cDSML\uff5ctool_calls>a", calls=[("score", "{}")], finish="tool_calls", req=DSTOOLS),
]}

# ---------------------------------------------------------------- pythonic / llama4_pythonic
# vLLM: ast.parse of the stripped output, a list of calls with literal keyword values;
# arguments json.dumps(kwargs, ensure_ascii=False).
def pyc(name, **kw):
    return (name, json.dumps(kw, ensure_ascii=False))


def pythonic_cases(wrap):
    return [
        case("one call", wrap('[get_weather(city="San Francisco", days=3, unit=\'celsius\')]'),
             calls=[pyc("get_weather", city="San Francisco", days=3, unit="celsius")], finish="tool_calls", req=TOOLS),
        case("two calls, literals of every kind", wrap('[a(x=1.50, y=-2, z=True, n=None, l=[1, "t\\u00e9"], d={"k": {1: False}}), b()]'),
             calls=[pyc("a", x=1.5, y=-2, z=True, n=None, l=[1, "t" + U], d={"k": {"1": False}}), ("b", "{}")],
             finish="tool_calls", req=TOOLS),
        case("escapes and unicode", wrap("[f(s='line\\nq\\'\\\\', u=\"\u65e5\u672c\")]"),
             calls=[pyc("f", s="line\nq'\\", u="\u65e5\u672c")], finish="tool_calls", req=TOOLS),
        case("plain content", "The weather is fine.", content="The weather is fine.", req=TOOLS),
        case("a list that is not calls is content", wrap("[1, 2, 3]"), content=wrap("[1, 2, 3]"), req=TOOLS),
        case("a non-literal argument is content", wrap("[f(x=g())]"), content=wrap("[f(x=g())]"), req=TOOLS),
        case("truncated is content", wrap('[f(x="ab')[:-len(wrap(""))] if wrap("") else '[f(x="ab',
             content=wrap('[f(x="ab')[:-len(wrap(""))] if wrap("") else '[f(x="ab', req=TOOLS,
             note="held to the end and read whole, as vLLM's non-streaming path reads it"),
        case("text after the list is content", wrap("[f()]") + " done", content=wrap("[f()]") + " done", req=TOOLS),
        case("tool_choice none: all content", wrap("[f()]"), content=wrap("[f()]"),
             req={"tools": True, "tool_choice": "none"}),
    ]


pythonic = {"reasoning": "", "tool": "pythonic", "cases": pythonic_cases(lambda x: x)}
llama4_pythonic = {"reasoning": "", "tool": "llama4_pythonic", "cases": pythonic_cases(lambda x: x) + [
    case("python tags", "<|python_start|>[f(a=1)]<|python_end|>", calls=[pyc("f", a=1)], finish="tool_calls", req=TOOLS),
    case("tags with whitespace", "<|python_start|>\n[f(a=1), g(b='x')]\n<|python_end|>",
         calls=[pyc("f", a=1), pyc("g", b="x")], finish="tool_calls", req=TOOLS),
]}

for fname, data in [("hermes", hermes), ("llama3_json", llama), ("deepseek_v3", deepseek),
                    ("mistral", mistral), ("openai", harmony), ("tool_choice", choice)] + list(reasoning_files.items()) + [
        ("qwen3_coder", qwen3_coder), ("qwen3_xml", qwen3_xml), ("glm45", glm45), ("glm47", glm47),
        ("kimi_k2", kimi_k2), ("deepseek_v31", deepseek_v31), ("seed_oss", seed_oss),
        ("minimax_m2", minimax_m2), ("granite", granite), ("step3", step3), ("deepseek_v32", deepseek_v32),
        ("pythonic", pythonic), ("llama4_pythonic", llama4_pythonic)]:
    with open(fname + ".json", "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
