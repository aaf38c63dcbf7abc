"""llama.cpp (through llama-cpp-python, 2 threads) on a GGUF file: 128-token prefill and 32
greedy decode steps, ROUNDS rounds; prints the best and the median of each, and the load
average. The prompt and step counts are those of `cargo bench --bench generate`, so runs of
the two can be alternated in one window (docs/performance.md).

Usage: python3 scripts/llama_cpp_peer.py MODEL.gguf [ROUNDS] [THREADS]
Make the model with `python3 shared/peers/llm_decode_peers.py OUT` (llama125m-*.gguf) or
`cargo run --release --features models --example make_model -- --preset 125m --gguf q4_0`.
"""
import sys, time
import numpy as np
import llama_cpp.llama_cpp as lc
from llama_cpp import Llama

# llama.cpp's repack of quantized weights into extra buffer types crashed on this machine's CPU:
# plain CPU buffers, as shared/peers/llm_decode_peers.py does.
orig = lc.llama_model_default_params


def params():
    p = orig()
    p.use_extra_bufts = False
    return p


lc.llama_model_default_params = params
path = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
llm = Llama(model_path=path, n_ctx=512, n_threads=threads, n_batch=128, verbose=False, logits_all=False)
vocab = llm.n_vocab()
toks = [300 + (i * 7919) % 31000 for i in range(128)]
NEW = 32
pres, decs = [], []
llm.reset()
llm.eval(toks[:8])  # warm-up
for _ in range(rounds):
    llm.reset()
    t = time.perf_counter()
    llm.eval(toks)
    pres.append(128 / (time.perf_counter() - t))
    t = time.perf_counter()
    for _ in range(NEW):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))
        llm.eval([int(np.argmax(logits))])
    decs.append(NEW / (time.perf_counter() - t))
pres.sort()
decs.sort()
load = open("/proc/loadavg").read().split()[0]
print(f"llama.cpp {path}: prefill {pres[-1]:.0f} ({pres[len(pres) // 2]:.0f}) tok/s, "
      f"decode {decs[-1]:.1f} ({decs[len(decs) // 2]:.1f}) tok/s, load average {load}", flush=True)
