#!/usr/bin/env python3
"""Renders every chat template of a fixture folder with every conversation, as the reference for
tests/inference/chat_template_test.cc.

    python3 tools/make_chat_fixtures.py tests/fixtures/chat_templates OUT_DIR [--engine transformers|jinja2]

The folder holds <name>.json files ({"chat_template", "special_tokens", "source"}) and
conversations.json (a list of {"name", "messages", "tools"?, "add_generation_prompt", "extra"?}).
OUT_DIR/expected.json gets {template name: {conversation name: {"text": ...} or {"error": ...,
"raised": bool}}}; copy it into the fixture folder.

--engine transformers (the default, and the one the committed references come from) calls
apply_chat_template(tokenize=False) of a tokenizer that carries the fixture's special tokens.
--engine jinja2 reproduces transformers' Jinja environment (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, tojson, raise_exception, strftime_now) for machines
without transformers; it is a development aid, not a reference.

strftime_now reads the clock in transformers; both engines here pin it to 2024-07-26, the date
rote formats by default, so the references do not depend on the day they were made.
"""
import argparse
import datetime as _dt
import json
import os
import sys

FIXED_DAY = _dt.datetime(2024, 7, 26)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):  # noqa: ARG003 - the signature of datetime.now
        return FIXED_DAY


def render_transformers():
    import transformers
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    # Pin the clock wherever this transformers version defines strftime_now.
    for mod_name in ("transformers.utils.chat_template_utils", "transformers.tokenization_utils_base"):
        mod = sys.modules.get(mod_name) or __import__(mod_name, fromlist=["_"])
        if hasattr(mod, "datetime"):
            mod.datetime = _FixedDatetime

    def render(template, special, conv):
        tok = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")), **special)
        tok.chat_template = template
        kwargs = dict(conv.get("extra", {}))
        return tok.apply_chat_template(conv["messages"], tools=conv.get("tools"),
                                       add_generation_prompt=conv["add_generation_prompt"],
                                       tokenize=False, **kwargs)

    return render, "transformers " + transformers.__version__


def render_jinja2():
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_DAY.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, special, conv):
        compiled = env.from_string(template)
        # transformers always passes tools and documents, None when absent; extra (documents
        # included) overrides the special tokens.
        kwargs = dict(special, documents=None)
        kwargs.update(conv.get("extra", {}))
        return compiled.render(messages=conv["messages"], tools=conv.get("tools"),
                               add_generation_prompt=conv["add_generation_prompt"], **kwargs)

    return render, "jinja2 " + jinja2.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--engine", choices=["transformers", "jinja2"], default="transformers")
    args = ap.parse_args()

    render, engine = render_transformers() if args.engine == "transformers" else render_jinja2()
    with open(os.path.join(args.fixture_dir, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    expected = {"engine": engine, "templates": {}}
    for file in sorted(os.listdir(args.fixture_dir)):
        if not file.endswith(".json") or file in ("conversations.json", "expected.json"):
            continue
        with open(os.path.join(args.fixture_dir, file), encoding="utf-8") as f:
            fixture = json.load(f)
        results = {}
        for conv in conversations:
            try:
                results[conv["name"]] = {"text": render(fixture["chat_template"], fixture["special_tokens"], conv)}
            except Exception as e:  # noqa: BLE001 - every failure is a reference outcome
                raised = type(e).__name__ == "TemplateError"
                results[conv["name"]] = {"error": f"{type(e).__name__}: {e}", "raised": raised}
        expected["templates"][file[:-len(".json")]] = results
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(r) for r in expected["templates"].values())
    print(f"{engine}: {n} renders of {len(expected['templates'])} templates -> {args.out_dir}/expected.json")


if __name__ == "__main__":
    main()
