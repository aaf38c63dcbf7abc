"""Quantizes a GGUF file with llama.cpp's own quantizer (`llama_model_quantize`, through
llama-cpp-python), for the K-quant rows of `cargo bench --bench generate` and their llama.cpp
peer (`scripts/llama_cpp_peer.py`): both sides read the same file.

Usage: python3 scripts/quantize_gguf.py SRC.gguf DST.gguf q4_k_m|q6_k|q4_k_s|q8_0|q4_0
Make SRC with `cargo run --release --features models --example make_model -- --out target/llm125m
--preset 125m --gguf f32` (target/llm125m/model-f32.gguf); write DST as
target/llm125m/model-q4_k_m.gguf (or model-q6_k.gguf) for the bench to find it.
"""
import ctypes
import sys

import llama_cpp

FTYPES = {
    "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q4_k_s": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "q6_k": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}

src, dst, kind = sys.argv[1], sys.argv[2], sys.argv[3].lower()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = FTYPES[kind]
params.nthread = 2
rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
if rc != 0:
    sys.exit(f"llama_model_quantize({src} -> {dst}, {kind}) failed: {rc}")
print(f"{dst}: {kind}")
