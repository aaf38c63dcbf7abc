#!/usr/bin/env python3
"""Writes tests/data/gguf/fixture.gguf with the Python `gguf` package (llama.cpp's gguf-py), so
tests/models/gguf.rs proves wgtensor reads files from a real writer. Python is not needed to build or
test: the output is committed. Rerun with `python3 scripts/make_gguf_fixture.py` (gguf 0.19).

The file holds metadata of several types; dense tensors (F32, F16, BF16); Q8_0 and Q4_0 tensors
quantized by gguf-py from the F32 tensor `source` (wgtensor's quantizer must give the same
bytes); and Q4_K and Q6_K tensors of random blocks, each beside `<name>.expected`, gguf-py's
dequantization of it in F32 (wgtensor's must give the same values).
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

rng = np.random.default_rng(23)
out = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "gguf", "fixture.gguf")
os.makedirs(os.path.dirname(out), exist_ok=True)

w = gguf.GGUFWriter(out, "llama")
w.add_block_count(2)
w.add_context_length(128)
w.add_rope_freq_base(10000.0)
w.add_bool("test.flag", True)
w.add_array("test.floats", [0.5, -1.25, 3.0])
w.add_token_list(["<s>", "</s>", "hello", "wörld"])
w.add_string("test.name", "gguf-py fixture")

source = rng.standard_normal((6, 64)).astype(np.float32)
source[0, :32] = np.linspace(-1, 1, 32, dtype=np.float32)  # ties in the rounding
w.add_tensor("source", source)
w.add_tensor("dense.f16", source.astype(np.float16))
bf = quants.quantize(source, T.BF16)
w.add_tensor("dense.bf16", bf, raw_shape=bf.shape, raw_dtype=T.BF16)
w.add_tensor("dense.bf16.expected", quants.dequantize(bf, T.BF16).astype(np.float32))
for name, t in [("q8_0", T.Q8_0), ("q4_0", T.Q4_0)]:
    q = quants.quantize(source, t)
    w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
for name, t, rows in [("q4_k", T.Q4_K, 3), ("q6_k", T.Q6_K, 2)]:
    block, size = gguf.GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(rows, size), dtype=np.uint8)
    # Finite f16 super-scales: Q4_K keeps d, dmin first; Q6_K keeps d last.
    at = [0, 2] if t == T.Q4_K else [size - 2]
    for o in at:
        scales = (rng.standard_normal(rows) * 0.01).astype(np.float16)
        raw[:, o:o + 2] = scales.view(np.uint8).reshape(rows, 2)
    w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=t)
    w.add_tensor(name + ".expected", quants.dequantize(raw, t).astype(np.float32))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out, os.path.getsize(out), "bytes")
