#!/usr/bin/env python3
"""Makes the reference fixtures under tests/fixtures/<family>/ with the real Hugging Face libraries.

For each family (qwen2, llama3, qwen3, and the model families mistral, gemma, gemma2, gemma3,
phi3, starcoder2, granite, deepseek_coder, qwen3_moe) it writes a tiny model directory that rote loads as it would a
published one, plus what the real libraries computed from it:

  config.json, generation_config.json   fields of the published configs, shrunk
  tokenizer.json, tokenizer_config.json  a byte-level BPE trained here with the family's
                                         normalizer, pre-tokenizer regex and added tokens
  model.safetensors                      random weights, stored in the family's dtype
  tokenizer_cases.json                   tokenizers' encodings/decodings of tools/tokenizer_corpus.json,
                                         and transformers' apply_chat_template outputs (the tokenizer
                                         families only: the model families reuse a tokenizer spec)
  reference.json                         prompts (ids), 16-token greedy continuations (fp32)
  reference_logits.safetensors           fp32 logits of every position of each prompt

Run where torch, transformers and tokenizers are installed (the GPU machine; it runs on CPU):
    python3 tools/make_fixtures.py [--out tests/fixtures]
Needs no network: every config is written inline below.
"""

import argparse
import json
import os
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS_PATH = ROOT / "tools" / "tokenizer_corpus.json"

# Pre-tokenizer regexes exactly as the published tokenizer.json files write them.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Chat templates as published (Qwen2.5-Instruct, Llama-3.1-Instruct, Qwen3). Raw strings: the
# "\n" inside Jinja string literals is Jinja's escape, as in the published JSON.
QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

QWEN3_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Added tokens in published order: (content, special). Qwen2.5's list; the qwen2 fixture also
# carries four test-only tokens that exercise the lstrip/rstrip/single_word/normalized flags,
# which the published families do not use but tokenizer.json allows.
QWEN2_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False),
]
QWEN2_FLAG_TOKENS = [
    dict(content="<|lstrip_test|>", special=True, lstrip=True),
    dict(content="<|rstrip_test|>", special=False, rstrip=True),
    dict(content="[word]", special=False, single_word=True),
    dict(content="caf\u00e9", special=False, normalized=True),
]
QWEN3_ADDED = QWEN2_ADDED + [
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
LLAMA3_ADDED = [
    ("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<|reserved_special_token_0|>", True),
    ("<|reserved_special_token_1|>", True), ("<|finetune_right_pad_id|>", True),
    ("<|reserved_special_token_2|>", True), ("<|start_header_id|>", True),
    ("<|end_header_id|>", True), ("<|eom_id|>", True), ("<|eot_id|>", True),
    ("<|python_tag|>", True), ("<|reserved_special_token_3|>", True),
    ("<|reserved_special_token_4|>", True),
]

# Text the tiny BPEs are trained on: enough variety that merges exist for words, numbers, code,
# CJK and emoji, so the corpus encodings exercise real merging rather than single bytes.
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "Once upon a time there was a small model that learned to write code and answer questions.",
    "It's what they'll say: we've seen it, I'm sure, and you'd agree that it isn't hard.",
    "def main():\n    for i in range(10):\n        print(i, i * i)\n    return 0\n",
    "local function add(a, b)\n  return a + b\nend\nreturn add(1, 2)\n",
    "if (x > 0 && y < 10) { return x + y; } else { return -1; }\n",
    "{\"name\": \"example\", \"values\": [1, 2, 3], \"enabled\": true}\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 42 1,000,000 12345",
    "\u4f60\u597d\u4e16\u754c\u3002\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u6211\u4eec\u559c\u6b22\u5199\u4ee3\u7801\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u3053\u3093\u306b\u3061\u306f\u3002",
    "Emoji: \U0001F600 \U0001F60D \U0001F44D \U0001F680 \u2764\ufe0f",
    "Caf\u00e9 r\u00e9sum\u00e9 na\u00efve fa\u00e7ade \u00fcber Stra\u00dfe \u00c5ngstr\u00f6m",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u0438 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "Hello world! Hello, World? hello... HELLO!!! Goodbye, world.",
    "    indented with spaces\n\tindented with a tab\n\n\nthree newlines\r\nwindows line\n",
    "user assistant system tool think answer question reasoning response",
]


def load_corpus():
    with open(CORPUS_PATH, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    out = []
    for c in cases:
        if "hex" in c:
            raw = bytes.fromhex(c["hex"])
            # The reference sees what rote documents: invalid UTF-8 replaced by U+FFFD.
            out.append(dict(name=c["name"], hex=c["hex"], text=raw.decode("utf-8", errors="replace"),
                            train=c.get("train", True)))
        else:
            out.append(dict(name=c["name"], text=c["text"], train=c.get("train", True)))
    return out


def build_tokenizer(family, spec, corpus, vocab_size):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)

    tok = Tokenizer(models.BPE())
    if spec["nfc"]:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(spec["pattern"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=spec["trim_offsets"],
                                 use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    texts = TRAINING_TEXT * 8 + [c["text"] for c in corpus if c["train"]]
    tok.train_from_iterator(texts, trainer)
    for content, special in spec["added"]:
        t = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                       single_word=False)
        # One call per token keeps the published order of ids.
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    for flags in spec.get("flag_tokens", []):
        t = AddedToken(flags["content"], special=flags.get("special", False),
                       normalized=flags.get("normalized", False), lstrip=flags.get("lstrip", False),
                       rstrip=flags.get("rstrip", False), single_word=flags.get("single_word", False))
        (tok.add_special_tokens if flags.get("special") else tok.add_tokens)([t])
    if family == "llama3":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def finish_tokenizer_json(path, spec):
    """Edits the saved tokenizer.json into the published shape: Llama 3's ignore_merges, and the
    merges format each family's file uses (Qwen2 old "a b" strings, the others [a, b] pairs)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    model = data["model"]
    model["ignore_merges"] = spec["ignore_merges"]
    # The binding may not take trim_offsets; set it as the published files have it.
    for pre in data["pre_tokenizer"]["pretokenizers"]:
        if pre["type"] == "ByteLevel":
            pre["trim_offsets"] = spec["trim_offsets"]
            pre["add_prefix_space"] = False
            pre["use_regex"] = False
    merges = model["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else list(m) for m in merges]
    for p in pairs:
        assert len(p) == 2 and " " not in p[0] and " " not in p[1], p
    model["merges"] = [f"{a} {b}" for a, b in pairs] if spec["merges_as_strings"] else pairs
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    return data


def chat_conversations(family):
    convs = [
        ([{"role": "user", "content": "Hello!"}], True),
        ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}], True),
        ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}], True),
        ([{"role": "user", "content": "Write a Lua function."},
          {"role": "assistant", "content": "function f() return 1 end"}], False),
        ([{"role": "user", "content": "  padded content \n\n"}], True),
        ([{"role": "system", "content": "\n sys with spaces \t"}, {"role": "user", "content": "x"}], False),
        ([{"role": "user", "content": "\u4f60\u597d \U0001F600 caf\u00e9"}], True),
        ([{"role": "user", "content": ""}], True),
        ([{"role": "user", "content": "first"}, {"role": "system", "content": "late system"},
          {"role": "user", "content": "second"}], True),
        ([{"role": "user", "content": "q1"},
          {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nold answer"},
          {"role": "user", "content": "q2"}], True),
        ([{"role": "user", "content": "q1"},
          {"role": "assistant", "content": "<think>\nnew reasoning\n</think>\n\nnew answer"}], False),
        ([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "plain answer"}], False),
        # Qwen3: reasoning kept for assistant turns after the last real query (tool loop).
        ([{"role": "user", "content": "q"},
          {"role": "assistant", "content": "<think>\nr1\n</think>\n\ncall"},
          {"role": "tool", "content": "res"},
          {"role": "assistant", "content": "<think>\nr2\n</think>\n\nfinal"}], False),
        ([{"role": "user", "content": "q"},
          {"role": "assistant", "content": "<think>\nr1\n</think>\n\ncall"},
          {"role": "tool", "content": "res"}], True),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "\n\nanswer"}], False),
        ([{"role": "user", "content": "q"},
          {"role": "assistant", "content": "<think>a</think>b</think>\nc"}], False),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "no think"},
          {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\n\nx\n\n</think>y"}],
         False),
        ([{"role": "system", "content": "only system"}], True),
        ([{"role": "system", "content": "   "}, {"role": "user", "content": "u"}], True),
        ([{"role": "user", "content": "use <|im_end|> and <|eot_id|> literally"}], True),
    ]
    if family in ("qwen2", "qwen3"):
        convs.append(([{"role": "user", "content": "call it"}, {"role": "assistant", "content": "ok"},
                       {"role": "tool", "content": "result one"}, {"role": "tool", "content": "result two"},
                       {"role": "user", "content": "thanks"}], True))
        convs.append(([{"role": "user", "content": "<tool_response>\nx\n</tool_response>"}], True))
    if family == "llama3":
        convs.append(([{"role": "user", "content": "call it"},
                       {"role": "tool", "content": "result \"one\"\n\u00e9"}], True))
        convs.append(([{"role": "ipython", "content": "r"}], False))
    return convs


def render_chat(tok, spec, out_dir):
    """Returns (method, fn(messages, add_generation_prompt) -> text) rendering the chat template
    the way transformers does; tries transformers' own tokenizer classes first."""
    errors = []
    try:
        try:
            from transformers import PreTrainedTokenizerFast as Fast
        except ImportError:  # transformers 5 renamed the class
            from transformers import TokenizersBackend as Fast
        kwargs = dict(tokenizer_object=tok, eos_token=spec["eos_token"])
        if spec["bos_token"]:
            kwargs["bos_token"] = spec["bos_token"]
        hf = Fast(**kwargs)
        hf.chat_template = spec["template"]
        fn = lambda m, g: hf.apply_chat_template(m, tokenize=False, add_generation_prompt=g)
        fn([{"role": "user", "content": "probe"}], True)
        return "transformers.PreTrainedTokenizerFast(tokenizer_object)", fn
    except Exception as e:
        errors.append(repr(e))
    try:
        from transformers import AutoTokenizer
        auto = AutoTokenizer.from_pretrained(str(out_dir))
        fn = lambda m, g: auto.apply_chat_template(m, tokenize=False, add_generation_prompt=g)
        fn([{"role": "user", "content": "probe"}], True)
        return "transformers.AutoTokenizer", fn
    except Exception as e:
        errors.append(repr(e))
    print(f"WARNING: transformers chat rendering failed ({errors}); using jinja2 as transformers sets it up")
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(spec["template"])
    special = dict(eos_token=spec["eos_token"], bos_token=spec["bos_token"] or "")
    return "jinja2", lambda m, g: compiled.render(messages=m, add_generation_prompt=g, **special)


def tokenizer_cases(family, spec, corpus, out_dir):
    from tokenizers import Tokenizer
    reloaded = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    reloaded_plain = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    reloaded_plain.encode_special_tokens = True
    cases = []
    for c in corpus:
        enc = reloaded.encode(c["text"], add_special_tokens=False)
        ids = list(enc.ids)
        plain = list(reloaded_plain.encode(c["text"], add_special_tokens=False).ids)
        entry = dict(name=c["name"], ids=ids, tokens=list(enc.tokens), ids_no_special=plain,
                     decoded=reloaded.decode(ids, skip_special_tokens=False),
                     decoded_skip_special=reloaded.decode(ids, skip_special_tokens=True))
        if "hex" in c:
            entry["hex"] = c["hex"]
        else:
            entry["text"] = c["text"]
        cases.append(entry)

    # Decoding of arbitrary id sequences, including ones that cut UTF-8 characters.
    rng = random.Random(1234 + len(family))
    n = reloaded.get_vocab_size(with_added_tokens=True)
    decode_cases = []
    for _ in range(40):
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 9))]
        decode_cases.append(dict(ids=ids, decoded=reloaded.decode(ids, skip_special_tokens=False),
                                 decoded_skip_special=reloaded.decode(ids, skip_special_tokens=True)))

    method, render = render_chat(Tokenizer.from_file(str(out_dir / "tokenizer.json")), spec, out_dir)
    chats = []
    for messages, gen in chat_conversations(family):
        text = render(messages, gen)
        chats.append(dict(messages=messages, add_generation_prompt=gen, text=text,
                          ids=list(reloaded.encode(text, add_special_tokens=False).ids)))
    # The same template through AutoTokenizer from the written directory, as a cross-check that
    # tokenizer_config.json is read the way published ones are.
    try:
        from transformers import AutoTokenizer
        auto = AutoTokenizer.from_pretrained(str(out_dir))
        for ch in chats:
            t = auto.apply_chat_template(ch["messages"], tokenize=False,
                                         add_generation_prompt=ch["add_generation_prompt"])
            if t != ch["text"]:
                print(f"WARNING {family}: AutoTokenizer chat text differs for {ch['messages']!r}")
        for c in corpus:
            a = auto.encode(c["text"], add_special_tokens=False)
            if a != next(x["ids"] for x in cases if x["name"] == c["name"]):
                print(f"WARNING {family}: AutoTokenizer encoding differs for {c['name']}")
    except Exception as e:  # report, the tokenizers-library results above are the reference
        print(f"WARNING {family}: AutoTokenizer cross-check failed: {e!r}")

    vocab = reloaded.get_vocab(with_added_tokens=True)
    return dict(family=family, vocab_size=n, chat_rendered_by=method,
                added_tokens=[dict(id=vocab[c], content=c) for c, _ in spec["added"]],
                cases=cases, decode_cases=decode_cases, chat=chats)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def make_family(family, spec, corpus, out_root):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    out_dir = out_root / family
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in out_dir.iterdir():
        p.unlink()

    tok = build_tokenizer(family, spec, corpus, spec["bpe_vocab"])
    tok.save(str(out_dir / "tokenizer.json"))
    finish_tokenizer_json(out_dir / "tokenizer.json", spec)
    # From here on, the tokenizer as written (ignore_merges and the merges format edited in).
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    ids = {name: vocab[name] for name, _ in spec["added"]}

    # config.json: the published fields, shrunk. Padded vocab (like Qwen's 151936 rows for
    # 151665 tokens) where the family pads.
    pad = spec["vocab_pad_to"]
    vocab_rows = (n_tok + pad - 1) // pad * pad if pad else n_tok
    config = dict(spec["config"])
    config["vocab_size"] = vocab_rows
    for key, value in list(config.items()):
        if isinstance(value, str) and value.startswith("id:"):
            config[key] = ids[value[3:]]
        elif isinstance(value, list) and value and isinstance(value[0], str) and value[0].startswith("id:"):
            config[key] = [ids[v[3:]] for v in value]
    config["torch_dtype"] = spec["dtype"]
    gen_config = {k: ([ids[x[3:]] for x in v] if isinstance(v, list) else
                      ids[v[3:]] if isinstance(v, str) and v.startswith("id:") else v)
                  for k, v in spec["generation_config"].items()}

    tok_config = dict(spec["tokenizer_config"])
    tok_config["chat_template"] = spec["template"]
    tok_config["added_tokens_decoder"] = {
        str(vocab[c]): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                            single_word=False, special=s) for c, s in spec["added"]}
    for flags in spec.get("flag_tokens", []):
        tok_config["added_tokens_decoder"][str(vocab[flags["content"]])] = dict(
            content=flags["content"], lstrip=flags.get("lstrip", False),
            normalized=flags.get("normalized", False), rstrip=flags.get("rstrip", False),
            single_word=flags.get("single_word", False), special=flags.get("special", False))
    write_json(out_dir / "tokenizer_config.json", tok_config)
    write_json(out_dir / "config.json", config)
    write_json(out_dir / "generation_config.json", gen_config)

    # Random weights, scaled so logits spread (near-ties would make greedy fragile); norms and
    # biases random too so a loader that skips them fails the logits comparison.
    torch.manual_seed(spec["seed"])
    hf_config = AutoConfig.from_pretrained(str(out_dir))
    model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager")
    model = model.to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif "norm" in name:
                # Gemma's norms multiply by (1 + w): their weights are offsets from 1.
                p.copy_((0.0 if spec.get("norm_offset") else 1.0) + 0.2 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5))
    store_dtype = getattr(torch, spec["dtype"])
    model = model.to(store_dtype)
    try:
        model.save_pretrained(str(out_dir), safe_serialization=True)
    except TypeError:  # transformers 5 always writes safetensors and dropped the argument
        model.save_pretrained(str(out_dir))
    # save_pretrained rewrites config.json in its own version's shape; put the published one back.
    write_json(out_dir / "config.json", config)
    write_json(out_dir / "generation_config.json", gen_config)
    write_json(out_dir / "tokenizer_config.json", tok_config)
    for extra in out_dir.iterdir():
        if extra.name not in ("config.json", "generation_config.json", "tokenizer_config.json",
                              "tokenizer.json", "model.safetensors"):
            print(f"{family}: removing {extra.name} written by save_pretrained")
            extra.unlink()

    from safetensors import safe_open
    with safe_open(str(out_dir / "model.safetensors"), framework="pt") as f:
        names = sorted(f.keys())
        stored_dtypes = sorted({str(f.get_tensor(k).dtype) for k in names})
    print(f"{family}: {len(names)} tensors stored as {stored_dtypes}; "
          f"lm_head stored: {'lm_head.weight' in names}")

    # The reference: the stored weights upcast to fp32, eager attention, on the CPU.
    try:
        ref = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32,
                                                   attn_implementation="eager")
    except TypeError:
        ref = AutoModelForCausalLM.from_pretrained(str(out_dir), torch_dtype=torch.float32,
                                                   attn_implementation="eager")
    ref.eval()
    with torch.no_grad():
        sd_ref = ref.state_dict()
        sd_store = model.state_dict()
        for k, v in sd_store.items():
            assert torch.equal(sd_ref[k], v.to(torch.float32)), f"{family}: {k} differs after reload"

    cases = tokenizer_cases(family, spec, corpus, out_dir)
    if spec.get("write_cases", True):
        write_json(out_dir / "tokenizer_cases.json", cases)

    prompts = []
    bos = [ids[spec["bos_token"]]] if spec["bos_token"] else []
    texts = [
        ("fox", "The quick brown fox jumps over the lazy dog."),
        ("code", "def main():\n    for i in range(10):\n        print(i, i * i)\n    return 0\n"
                 "local function add(a, b)\n  return a + b\nend\n"),
        ("unicode", "\u4f60\u597d\u4e16\u754c\u3002 \U0001F600 1234 caf\u00e9"),
    ]
    for name, text in texts:
        prompts.append((name, bos + tok.encode(text, add_special_tokens=False).ids))
    chat_text = cases["chat"][2]["text"]
    prompts.append(("chat", tok.encode(chat_text, add_special_tokens=False).ids))
    prompts.append(("one_token", [tok.encode("Hello", add_special_tokens=False).ids[0]]))

    # The incremental reference feeds one token per call through transformers' KV cache: a
    # position's rotary then depends on that position alone (longrope switches to its long
    # factors from original_max_position_embeddings on, as in a decode that crosses it).
    incremental = spec.get("incremental_reference", False)

    def step(token, past):
        out = ref(input_ids=torch.tensor([[token]], dtype=torch.long), past_key_values=past, use_cache=True)
        return out.logits[0, -1], out.past_key_values

    # Mixture of experts: the smallest gap, over every token of every prompt and every layer of
    # experts, between the last probability chosen and the first left out. A gap near fp32's
    # rounding would let rote choose another expert than transformers on these weights.
    margins = []
    if spec.get("router_margin"):
        hooks = []
        k = config["num_experts_per_tok"]
        def gap(_module, inputs, _output):
            logits = torch.nn.functional.linear(inputs[0].reshape(-1, inputs[0].shape[-1]), _module.weight)
            probs = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True).values
            margins.append(float((probs[:, k - 1] - probs[:, k]).min()))
        for name, module in ref.named_modules():
            if name.endswith("mlp.gate"):
                hooks.append(module.register_forward_hook(gap))

    logits_tensors = {}
    ref_prompts = []
    with torch.no_grad():
        for i, (name, pids) in enumerate(prompts):
            past = None
            if incremental:
                rows = []
                for t in pids:
                    row, past = step(t, past)
                    rows.append(row)
                logits = torch.stack(rows).to(torch.float32).contiguous()
            else:
                x = torch.tensor([pids], dtype=torch.long)
                logits = ref(input_ids=x).logits[0].to(torch.float32).contiguous()
            assert logits.shape == (len(pids), vocab_rows), logits.shape
            logits_tensors[f"logits.{i}"] = logits
            seq = list(pids)
            greedy = []
            last = logits[-1]
            for _ in range(16):
                if not incremental:
                    last = ref(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0, -1]
                nxt = int(torch.argmax(last).item())
                greedy.append(nxt)
                seq.append(nxt)
                if incremental:
                    last, past = step(nxt, past)
            top2 = torch.topk(logits[-1], 2).values
            ref_prompts.append(dict(name=name, ids=pids, logits_tensor=f"logits.{i}",
                                    greedy_ids=greedy,
                                    greedy_text=tok.decode(greedy, skip_special_tokens=False),
                                    last_top2_gap=float(top2[0] - top2[1])))
    if spec.get("router_margin"):
        for h in hooks:
            h.remove()
        print(f"{family}: smallest router margin {min(margins):.3g} over {len(margins)} router calls")
        assert min(margins) > 1e-5, f"{family}: router probabilities too close to rank; change the seed"
    save_file(logits_tensors, str(out_dir / "reference_logits.safetensors"))
    import tokenizers
    import transformers
    write_json(out_dir / "reference.json", dict(
        family=family, stored_dtype=spec["dtype"], reference_dtype="float32",
        attn_implementation="eager", device="cpu", greedy_tokens=16,
        reference_run="one token per call, KV cache" if incremental else "whole sequence per call",
        versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                      tokenizers=tokenizers.__version__),
        tokenizer_size=n_tok, config_vocab_size=vocab_rows, prompts=ref_prompts))
    print(f"{family}: tokenizer {n_tok} tokens, vocab rows {vocab_rows}, "
          f"{len(cases['cases'])} corpus cases, {len(cases['chat'])} chats, {len(prompts)} prompts")


def families():
    qwen_tok_config = dict(add_bos_token=False, add_prefix_space=False, bos_token=None,
                           clean_up_tokenization_spaces=False, eos_token="<|im_end|>",
                           errors="replace", model_max_length=32768, pad_token="<|endoftext|>",
                           split_special_tokens=False, tokenizer_class="Qwen2Tokenizer",
                           unk_token=None)
    out = {
        "qwen2": dict(
            pattern=QWEN2_PATTERN, nfc=True, trim_offsets=False, ignore_merges=False,
            merges_as_strings=True, added=QWEN2_ADDED, flag_tokens=QWEN2_FLAG_TOKENS,
            template=QWEN25_TEMPLATE, bos_token=None, eos_token="<|im_end|>", bpe_vocab=1000,
            vocab_pad_to=128, dtype="bfloat16", seed=2,
            tokenizer_config=qwen_tok_config,
            # Qwen2.5-0.5B-Instruct, shrunk: q/k/v biases, tied embeddings.
            config=dict(architectures=["Qwen2ForCausalLM"], attention_dropout=0.0,
                        bos_token_id="id:<|endoftext|>", eos_token_id="id:<|im_end|>",
                        hidden_act="silu", hidden_size=64, initializer_range=0.02,
                        intermediate_size=128, max_position_embeddings=32768,
                        max_window_layers=21, model_type="qwen2", num_attention_heads=4,
                        num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-6,
                        rope_theta=1000000.0, sliding_window=32768, tie_word_embeddings=True,
                        transformers_version="4.43.1", use_cache=True,
                        use_sliding_window=False),
            generation_config=dict(bos_token_id="id:<|endoftext|>", do_sample=True,
                                   eos_token_id=["id:<|im_end|>", "id:<|endoftext|>"],
                                   pad_token_id="id:<|endoftext|>", repetition_penalty=1.1,
                                   temperature=0.7, top_k=20, top_p=0.8)),
        "llama3": dict(
            pattern=LLAMA3_PATTERN, nfc=False, trim_offsets=True, ignore_merges=True,
            merges_as_strings=False, added=LLAMA3_ADDED, template=LLAMA31_TEMPLATE,
            bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", bpe_vocab=1000,
            vocab_pad_to=0, dtype="float32", seed=3,
            tokenizer_config=dict(bos_token="<|begin_of_text|>", clean_up_tokenization_spaces=True,
                                  eos_token="<|eot_id|>",
                                  model_input_names=["input_ids", "attention_mask"],
                                  model_max_length=131072,
                                  tokenizer_class="PreTrainedTokenizerFast"),
            # Llama-3.1-8B-Instruct, shrunk: llama3 rope scaling, untied lm_head.
            config=dict(architectures=["LlamaForCausalLM"], attention_bias=False,
                        attention_dropout=0.0, bos_token_id="id:<|begin_of_text|>",
                        eos_token_id=["id:<|end_of_text|>", "id:<|eom_id|>", "id:<|eot_id|>"],
                        hidden_act="silu", hidden_size=64, initializer_range=0.02,
                        intermediate_size=128, max_position_embeddings=131072, mlp_bias=False,
                        model_type="llama", num_attention_heads=4, num_hidden_layers=2,
                        num_key_value_heads=2, pretraining_tp=1, rms_norm_eps=1e-5,
                        rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=8192,
                                          rope_type="llama3"),
                        rope_theta=500000.0, tie_word_embeddings=False,
                        transformers_version="4.43.0.dev0", use_cache=True),
            generation_config=dict(bos_token_id="id:<|begin_of_text|>", do_sample=True,
                                   eos_token_id=["id:<|end_of_text|>", "id:<|eom_id|>",
                                                 "id:<|eot_id|>"],
                                   temperature=0.6, top_p=0.9)),
        "qwen3": dict(
            pattern=QWEN2_PATTERN, nfc=True, trim_offsets=False, ignore_merges=False,
            merges_as_strings=False, added=QWEN3_ADDED, template=QWEN3_TEMPLATE,
            bos_token=None, eos_token="<|im_end|>", bpe_vocab=1000, vocab_pad_to=64,
            dtype="float16", seed=4, tokenizer_config=qwen_tok_config,
            # Qwen3-0.6B, shrunk: q/k norms, explicit head_dim (heads*head_dim != hidden), tied.
            config=dict(architectures=["Qwen3ForCausalLM"], attention_bias=False,
                        attention_dropout=0.0, bos_token_id="id:<|endoftext|>",
                        eos_token_id="id:<|im_end|>", head_dim=32, hidden_act="silu",
                        hidden_size=64, initializer_range=0.02, intermediate_size=128,
                        max_position_embeddings=40960, max_window_layers=28,
                        model_type="qwen3", num_attention_heads=4, num_hidden_layers=2,
                        num_key_value_heads=2, rms_norm_eps=1e-6, rope_scaling=None,
                        rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=True,
                        transformers_version="4.51.0", use_cache=True,
                        use_sliding_window=False),
            generation_config=dict(bos_token_id="id:<|endoftext|>", do_sample=True,
                                   eos_token_id=["id:<|im_end|>", "id:<|endoftext|>"],
                                   pad_token_id="id:<|endoftext|>", temperature=0.6, top_k=20,
                                   top_p=0.95)),
    }
    out.update(model_families(out))
    return out


# The model families: the architectures of published code models, shrunk so each feature still
# acts on the prompts (sliding windows shorter than the prompts, local and global layers, caps that
# cap, nonzero biases). Their tokenizers reuse the qwen2 / llama3 specs (a byte-level BPE trained
# here); the families' own tokenizers are tested elsewhere.
def model_families(base):
    def family(tok, seed, dtype, config, **extra):
        keep = ("pattern", "nfc", "trim_offsets", "ignore_merges", "merges_as_strings", "added",
                "template", "bos_token", "eos_token", "bpe_vocab", "vocab_pad_to", "tokenizer_config")
        spec = {k: base[tok][k] for k in keep}
        eos = "id:<|im_end|>" if tok == "qwen2" else "id:<|eot_id|>"
        bos = "id:<|endoftext|>" if tok == "qwen2" else "id:<|begin_of_text|>"
        spec.update(seed=seed, dtype=dtype, write_cases=False, config=config,
                    generation_config=dict(bos_token_id=bos, eos_token_id=[eos], do_sample=False))
        spec.update(extra)
        return spec

    def factors(seed, n, lo, hi):
        rng = random.Random(seed)
        return [round(rng.uniform(lo, hi), 4) for _ in range(n)]

    common = dict(attention_dropout=0.0, hidden_size=64, initializer_range=0.02,
                  intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  transformers_version="4.51.0", use_cache=True)
    q_ids = dict(bos_token_id="id:<|endoftext|>", eos_token_id="id:<|im_end|>")
    l_ids = dict(bos_token_id="id:<|begin_of_text|>", eos_token_id="id:<|eot_id|>")
    return {
        # Mistral-7B-v0.1 / Codestral, shrunk: a sliding window on every layer, an explicit
        # head_dim whose heads do not add up to hidden_size (as Mistral Nemo), untied.
        "mistral": family("qwen2", 11, "bfloat16", dict(
            common, architectures=["MistralForCausalLM"], model_type="mistral", head_dim=24,
            hidden_act="silu", max_position_embeddings=32768, num_hidden_layers=2,
            rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=6, tie_word_embeddings=False,
            **q_ids)),
        # Gemma-2-2b, shrunk: (1 + w) norms, sandwich norms, the sqrt(hidden) embedding scale,
        # query_pre_attn_scalar != head_dim, attention and final soft-capping small enough to cap,
        # local (even) and global (odd) layers, GELU-tanh, tied.
        "gemma2": family("qwen2", 12, "bfloat16", dict(
            common, architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=16,
            hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=8192, num_hidden_layers=3, rms_norm_eps=1e-6,
            rope_theta=10000.0, query_pre_attn_scalar=24, attn_logit_softcapping=1.0,
            final_logit_softcapping=10.0, sliding_window=5, cache_implementation="hybrid",
            tie_word_embeddings=True, **q_ids), norm_offset=True),
        # Gemma-3-1b, shrunk: Gemma 2's layout plus (1 + w) q/k norms, a local rope base on the
        # sliding layers (all but every third: sliding_window_pattern), linear rope scaling on the
        # global ones, no soft-capping.
        "gemma3": family("qwen2", 13, "bfloat16", dict(
            common, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=16,
            hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32768,
            num_hidden_layers=3, rms_norm_eps=1e-6, rope_theta=1000000.0,
            rope_local_base_freq=10000.0, rope_scaling=dict(rope_type="linear", factor=2.0),
            query_pre_attn_scalar=20, sliding_window=6, sliding_window_pattern=3,
            attn_logit_softcapping=None, final_logit_softcapping=None,
            cache_implementation="hybrid", tie_word_embeddings=True, **q_ids), norm_offset=True),
        # Phi-4-mini, shrunk: fused qkv_proj and gate_up_proj, partial rotary (0.75 of head_dim),
        # longrope factors with original_max_position_embeddings (24) inside the prompts, so the
        # reference runs token by token through the cache (short factors below 24, long ones from
        # there on, both scaled by the attention factor); Phi-3-mini's window of 2047, tied.
        "phi3": family("llama3", 14, "bfloat16", dict(
            common, architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_act="silu",
            embd_pdrop=0.0, resid_pdrop=0.0, max_position_embeddings=8192,
            original_max_position_embeddings=24, num_hidden_layers=2, partial_rotary_factor=0.75,
            rms_norm_eps=1e-5, rope_theta=10000.0,
            rope_scaling=dict(type="longrope", short_factor=factors(100, 6, 1.0, 3.0),
                              long_factor=factors(200, 6, 2.0, 40.0)),
            sliding_window=2047, tie_word_embeddings=True, pad_token_id="id:<|end_of_text|>",
            **l_ids), incremental_reference=True),
        # StarCoder2-3b, shrunk: LayerNorm with bias, biases on every projection, the GELU-tanh
        # c_fc/c_proj MLP, a sliding window, tied (the class default: the key is left out).
        "starcoder2": family("qwen2", 15, "float16", dict(
            common, architectures=["Starcoder2ForCausalLM"], model_type="starcoder2",
            hidden_act="gelu_pytorch_tanh", max_position_embeddings=16384, num_hidden_layers=2,
            norm_epsilon=1e-5, rope_theta=999999.4420358813, sliding_window=7, use_bias=True,
            embedding_dropout=0.0, residual_dropout=0.0, **q_ids)),
        # Granite-3.x-8b, shrunk: the four multipliers (none neutral; the attention one unlike
        # 1/sqrt(head_dim)), attention and MLP biases, untied.
        "granite": family("llama3", 16, "bfloat16", dict(
            common, architectures=["GraniteForCausalLM"], model_type="granite", hidden_act="silu",
            max_position_embeddings=4096, num_hidden_layers=2, rms_norm_eps=1e-5,
            rope_theta=10000000.0, attention_bias=True, mlp_bias=True, embedding_multiplier=3.0,
            residual_multiplier=0.5, attention_multiplier=0.1, logits_scaling=4.0,
            tie_word_embeddings=False, **l_ids)),
        # CodeGemma-7b, shrunk: Gemma 1's (1 + w) norms, sqrt(hidden) embedding scale and GELU-tanh
        # MLP, a head_dim unlike hidden_size / heads, tied.
        "gemma": family("qwen2", 18, "bfloat16", dict(
            common, architectures=["GemmaForCausalLM"], model_type="gemma", head_dim=24,
            hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=8192, num_hidden_layers=2, rms_norm_eps=1e-6,
            rope_theta=10000.0, attention_bias=False, tie_word_embeddings=True, **q_ids),
            norm_offset=True),
        # Qwen3-Coder-30B-A3B, shrunk: Qwen3's attention (q/k norms, no biases) and a mixture of
        # 8 experts, 2 a token, renormalised (norm_topk_prob), with one dense layer
        # (mlp_only_layers) between two of experts, untied.
        "qwen3_moe": family("qwen2", 19, "bfloat16", dict(
            common, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", head_dim=16,
            hidden_act="silu", max_position_embeddings=32768, num_hidden_layers=3,
            rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False,
            use_sliding_window=False, sliding_window=None, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[1], tie_word_embeddings=False, **q_ids), router_margin=True),
        # DeepSeek-Coder-6.7B, shrunk: the Llama architecture with linear rope scaling.
        "deepseek_coder": family("llama3", 17, "bfloat16", dict(
            common, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
            max_position_embeddings=16384, num_hidden_layers=2, rms_norm_eps=1e-6,
            rope_theta=100000.0, rope_scaling=dict(type="linear", factor=4.0),
            attention_bias=False, mlp_bias=False, pretraining_tp=1, tie_word_embeddings=False,
            **l_ids)),
    }



def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures"))
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    ap.add_argument("--cases-only", action="store_true",
                    help="only rewrite tokenizer_cases.json from the tokenizer files already in --out")
    args = ap.parse_args()
    corpus = load_corpus()
    out_root = pathlib.Path(args.out)
    wanted = [f for f in args.only.split(",") if f]
    failed = []
    for family, spec in families().items():
        if wanted and family not in wanted:
            continue
        try:
            if args.cases_only:
                cases = tokenizer_cases(family, spec, corpus, out_root / family)
                write_json(out_root / family / "tokenizer_cases.json", cases)
                print(f"{family}: {len(cases['cases'])} corpus cases, {len(cases['chat'])} chats")
            else:
                make_family(family, spec, corpus, out_root)
        except Exception:  # one family's failure must not hide the others' results
            import traceback
            traceback.print_exc()
            failed.append(family)
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    print(f"fixtures: {total / 1e6:.2f} MB under {out_root}")
    if failed:
        print(f"FAILED: {failed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
