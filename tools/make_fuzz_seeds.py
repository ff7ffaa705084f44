#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (bench/fuzz/corpus/<target>/, docs/fuzzing.md).

Seeds are small real inputs: the test fixtures' model files (safetensors shrunk to their header
and one element a tensor, a model's files joined into one input) and hand-written edge cases.
The shipped blueprints, lockfiles and sample inputs are seeds too, read by bench/fuzz/run.sh
from blueprints/ itself. Run from the repository root; files are rewritten, never deleted (a
crash reproducer added by hand stays). Keep each seed under 64 KB.
"""
import base64
import glob
import hashlib
import hmac
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "bench", "fuzz", "corpus")
SEP = b"\n=====8<=====\n"  # bench/fuzz/fuzz_util.h kPartSeparator
PAGE_SECRET = b"fuzz-page-token-secret"  # bench/fuzz/page_token_fuzz.cc kSecret
MAX_SEED = 64 * 1024


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < MAX_SEED, (target, name, len(data))
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def families():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "tests", "fixtures", "*")))


# ---- safetensors -------------------------------------------------------------------------------

def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, offset, body = {}, 0, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        body += data
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def seeds_safetensors():
    size = {"F32": 4, "F16": 2, "BF16": 2}
    for fam in families():
        raw = read(f"tests/fixtures/{fam}/model.safetensors")
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        # The real header as published, with the data cut off: rejected, but every field is there.
        write("safetensors", f"{fam}_header_only", raw[: 8 + n])
        # The same tensor names and dtypes shrunk to one element each: accepted.
        small = [(k, v["dtype"], [1], b"\x01" * size[v["dtype"]]) for k, v in sorted(header.items()) if k != "__metadata__"]
        write("safetensors", f"{fam}_one_element", safetensors(small[:40], header.get("__metadata__")))
    write("safetensors", "empty_object", safetensors([]))
    write("safetensors", "three_dtypes", safetensors(
        [("a", "F32", [2], b"\0" * 8), ("b", "BF16", [1, 2], b"\1" * 4), ("c", "F16", [], b"\2" * 2),
         ("z", "F32", [0, 3], b"")], {"format": "pt"}))


def seeds_safetensors_index():
    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"]
    index = {"metadata": {"total_size": 1234},
             "weight_map": {n: f"model-0000{i % 2 + 1}-of-00002.safetensors" for i, n in enumerate(names)}}
    write("safetensors_index", "two_shards", json.dumps(index, indent=2))
    write("safetensors_index", "escapes", '{"weight_map": {"a\\u0000": "x\\u002e.safetensors", '
                                          '"b": "..\\/outside.safetensors"}}')


# ---- model config and tokenizer ----------------------------------------------------------------

def seeds_model_config():
    for fam in families():
        d = f"tests/fixtures/{fam}"
        write("model_config", fam, read(f"{d}/config.json") + SEP + read(f"{d}/generation_config.json"))
        write("model_config", f"{fam}_no_generation_config", read(f"{d}/config.json"))


def seeds_tokenizer():
    text = "Hello, world! 1234 naïve café — 日本語 <|im_end|> \t\n  x"
    for fam in families():
        d = f"tests/fixtures/{fam}"
        write("tokenizer", fam, SEP.join([read(f"{d}/tokenizer.json"), read(f"{d}/tokenizer_config.json"),
                                          read(f"{d}/config.json"), read(f"{d}/generation_config.json"),
                                          text.encode()]))
    # A byte-level BPE small enough for the fuzzer to change every part of it.
    alphabet = {}
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, extra = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    for b, c in zip(bs, cs):
        alphabet[chr(c)] = len(alphabet)
    vocab = dict(alphabet)
    merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r")]:
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
    tiny = {
        "version": "1.0",
        "added_tokens": [{"id": len(vocab), "content": "<|im_end|>", "special": True, "lstrip": False,
                          "rstrip": False, "single_word": False, "normalized": False}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    config = {"model_type": "qwen2", "eos_token_id": len(vocab)}
    write("tokenizer", "tiny_bpe", SEP.join([json.dumps(tiny, ensure_ascii=False).encode(),
                                             b'{"eos_token": "<|im_end|>"}', json.dumps(config).encode(),
                                             b"", b"hello world <|im_end|>"]))


# ---- run inputs, lockfiles, blueprints ---------------------------------------------------------

def seeds_json():
    write("json", "numbers", '[0,-0,1,-1,9223372036854775807,-9223372036854775808,1.5,-0.0,1e300,'
                             '2.5e-308,4.9e-324,1E5,0.1,123456789012345678901234567890.0]')
    write("json", "strings", '{"":"","a\\u0000b":"\\ud83d\\ude00","esc":"\\"\\\\\\/\\b\\f\\n\\r\\t",'
                             '"utf8":"naïve 日本語 😀","z":[true,false,null,{},[]]}')
    write("json", "nested", "[" * 40 + "{\"k\":1}" + "]" * 40)


def seeds_lockfile():
    write("lockfile", "quoting", "format = 1\nblueprint = \"b\"  # trailing comment\n\n[[point]]\n"
                                 "name = 'p'\nkind = \"lua_function\"\n"
                                 "source = \"return function(x) return \\\"\\\\u00e9\\u00e9\\\\t\\\" end\"\n"
                                 "\n[[point]]\nname = \"q\"\nkind = 're2_pattern'\r\n"
                                 "options = '{\"longest_match\":true}'\nsource = '''\na'b\n'''\n")


def seeds_blueprint():
    write("blueprint", "minimal.lua", 'local bp = rote.blueprint { name = "m", version = "1" }\n'
                                      'local re = bp:regex { name = "digits", task = "digits", '
                                      'examples = { { "a 12 b", { "12" } }, { "none", {} } } }\n'
                                      'local f = bp:lua { name = "double", task = "double it", '
                                      'signature = "function(n) -> number", tests = { { 2, 4 }, { { a = 1.5 }, { 3.0 } } } }\n'
                                      'function bp.run(input) return { re:find_all(input.text), f(input.n) } end\n'
                                      'return bp\n')


# ---- page tokens and the worker protocol -------------------------------------------------------

def page_token(payload):
    mac = hmac.new(PAGE_SECRET, payload, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(payload + mac).rstrip(b"=")


def seeds_page_token():
    for collection, flt, key in [(b"runs", b"", 42), (b"artifacts", b"state=pending", 9007199254740993),
                                 (b"runs", b"blueprint=invoice_totals", -1)]:
        h = hashlib.sha256(flt).hexdigest()[:16].encode()
        payload = b"p1|" + collection + b"|" + h + b"|" + str(key).encode()
        name = collection.decode() + "_" + str(key)
        write("page_token", f"token_{name}", b"\0" + SEP.join([page_token(payload), collection, flt]))
        write("page_token", f"signed_{name}", b"\1" + SEP.join([payload, collection, flt]))
        write("page_token", f"roundtrip_{name}", b"\2" + SEP.join([struct.pack("<q", key) + b"\x5a\x07", collection, flt]))


def enc_value(v):
    if v is None:
        return b"\0"
    if v is False:
        return b"\1"
    if v is True:
        return b"\2"
    if isinstance(v, int):
        return b"\3" + struct.pack("<q", v)
    if isinstance(v, float):
        return b"\4" + struct.pack("<d", v)
    if isinstance(v, (str, bytes)):
        b = v.encode() if isinstance(v, str) else v
        return b"\5" + struct.pack("<Q", len(b)) + b
    if isinstance(v, list):
        return b"\6" + struct.pack("<Q", len(v)) + b"".join(enc_value(e) for e in v)
    if isinstance(v, dict):
        items = sorted((k.encode(), e) for k, e in v.items())
        return b"\7" + struct.pack("<Q", len(items)) + b"".join(
            struct.pack("<Q", len(k)) + k + enc_value(e) for k, e in items)
    raise TypeError(v)


def u64b(b):
    return struct.pack("<Q", len(b)) + b


def seeds_worker_protocol():
    value = {"text": "INV-2024-0001 $1,234.50", "n": -7, "x": 2.5, "ok": True, "none": None,
             "list": [1, "two", [3.0], {}], "bytes": b"\xff\x00"}
    write("worker_protocol", "value", b"\2" + enc_value(value))
    src = b"return function(x) return x end"
    request = (struct.pack("<I", 0x31515352) + struct.pack("<QQQ", 100000000, 64 << 20, 1 << 20) + u64b(b"=artifact")
               + u64b(src) + struct.pack("<Q", 3) + enc_value("a") + enc_value(value) + enc_value([]))
    write("worker_protocol", "request", b"\0" + request)

    def status(code, msg):
        return struct.pack("<I", code) + u64b(msg)

    response = (struct.pack("<I", 0x31505352) + b"\0" + status(0, b"") + struct.pack("<Q", 2)
                + status(0, b"") + enc_value(value) + u64b(b"printed\n") + struct.pack("<QQQ", 1000, 4096, 8)
                + status(9, b"artifact:1: boom") + enc_value(None) + u64b(b"") + struct.pack("<QQQ", 5, 6, 0))
    write("worker_protocol", "response", b"\1" + response)
    more = struct.pack("<I", 0x31505352) + b"\1" + status(3, b"compile error") + struct.pack("<Q", 0)
    write("worker_protocol", "response_batch_error", b"\1" + more)


# ---- chat templates -----------------------------------------------------------------------------
def seeds_chat_template():
    """The fixture templates, each with a conversation that has tools and a tool call, and
    hand-written ones for the constructs the published templates leave out."""
    fixtures = os.path.join("tests", "fixtures", "chat_templates")
    conversations = json.loads(read(os.path.join(fixtures, "conversations.json")))
    conv = next(c for c in conversations if c["name"] == "tool_call_round_trip")
    context = json.dumps({"messages": conv["messages"], "tools": conv["tools"], "add_generation_prompt": True,
                          "bos_token": "<s>", "eos_token": "</s>"}, ensure_ascii=False).encode()
    for path in sorted(glob.glob(os.path.join(ROOT, fixtures, "*.json"))):
        name = os.path.basename(path)[:-len(".json")]
        if name in ("conversations", "expected"):
            continue
        template = json.loads(read(path))["chat_template"].encode()
        write("chat_template", name, template + SEP + context)
    write("chat_template", "nesting", "{{ ((((((((((1)))))))))) }}{% if a %}{% for x in y if x %}{{ loop.index }}"
                                      "{% else %}{% endfor %}{% endif %}")
    write("chat_template", "macro_call", "{% macro m(a, b=1) %}{{ caller(a) }}{% endmacro %}{% call(x) m(2) %}"
                                         "{{ x * 'ab' }}{% endcall %}")
    write("chat_template", "raw_ws", "  {%- raw -%} {{ }} {%- endraw -%}\n{#- c -#}\n{%+ set s | upper %}x{% endset %}{{ s }}")
    write("chat_template", "filters", "{{ [3,1,2]|sort|reverse|map('string')|join(',') }}{{ {'a':1}|tojson(indent=2) }}"
                                      "{{ 'a b'.split()|length is even }}{{ range(3)|select('odd')|list }}{{ '%s'|format(1) }}"
                                      "{{ 'x'|indent(2, true) }}")


def main():
    seeds_safetensors()
    seeds_safetensors_index()
    seeds_model_config()
    seeds_tokenizer()
    seeds_chat_template()
    seeds_json()
    seeds_lockfile()
    seeds_blueprint()
    seeds_page_token()
    seeds_worker_protocol()


if __name__ == "__main__":
    main()
