#!/usr/bin/env python3
"""What a vendor GEMM reaches on the prefill products' shapes: cuBLAS through PyTorch.

The yardstick beside exact_products_bench (the exact profile's products) and the fast profile's
prefill: for each product of a shape (q|k|v, o, gate|up, down, the dimensions of hf_peer.py's
SHAPES) and each token count, Y = X W^T timed with CUDA events (median of --reps after warm-up)

  - in fp32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, matmul precision
    "highest"): cuBLAS's SGEMM on the CUDA cores, free to sum in any order, against which the
    exact profile's canonical order is measured;
  - in bf16 (bf16 inputs, fp32 accumulation on the tensor cores): the rate the fast profile's
    three pieces a product divide by three.

  python3 bench/inference/products_peer.py [--shapes 0.5b,1.5b,7b] [--tokens 256,1000,4096] [--reps 10]

Prints one JSON line per product and token count: TFLOP/s in each precision (2 rows K tokens
flops a product). Compare with exact_products_bench's fraction of the fp32 FMA rate it measures
in the same call (docs/performance.md, "Exact prefill products").
"""
import argparse
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from hf_peer import SHAPES, emit, timed  # noqa: E402


def products(shape):
    d = SHAPES[shape]
    hidden, inter = d["hidden_size"], d["intermediate_size"]
    heads, kv = d["num_attention_heads"], d["num_key_value_heads"]
    head_dim = d.get("head_dim", hidden // heads)
    return [
        ("qkv", heads * head_dim + 2 * kv * head_dim, hidden),
        ("o", hidden, heads * head_dim),
        ("gate_up", 2 * inter, hidden),
        ("down", hidden, inter),
    ]


def rate(rows, cols, tokens, dtype, reps):
    torch.manual_seed(0)
    x = torch.randn(tokens, cols, device="cuda", dtype=dtype)
    w = torch.randn(rows, cols, device="cuda", dtype=dtype)
    out = torch.empty(tokens, rows, device="cuda", dtype=dtype)
    t = timed(lambda: torch.mm(x, w.t(), out=out), reps=reps, warm=3)
    del x, w, out
    return 2.0 * rows * cols * tokens / t / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="0.5b,1.5b,7b")
    ap.add_argument("--tokens", default="256,1000,4096")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")
    props = torch.cuda.get_device_properties(0)
    emit(what="device", name=props.name, sms=props.multi_processor_count, torch=torch.__version__,
         cublas_fp32="TF32 off")
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            print("unknown shape %s (known: %s)" % (shape, ", ".join(sorted(SHAPES))), file=sys.stderr)
            return 2
        for name, rows, cols in products(shape):
            for tokens in (int(t) for t in args.tokens.split(",")):
                emit(what="product_gemm", shape=shape, product=name, rows=rows, cols=cols, tokens=tokens,
                     fp32_TFLOPs=round(rate(rows, cols, tokens, torch.float32, args.reps), 2),
                     bf16_TFLOPs=round(rate(rows, cols, tokens, torch.bfloat16, args.reps), 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
