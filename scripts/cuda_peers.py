"""PyTorch's CUDA figures beside `examples/device_report` on an NVIDIA GPU: matmul f32 (TF32 off)
and f16 at 1024, 2048 and 4096, a device-to-device copy and a read-only reduction (GB/s), and
transformers' f16 greedy decode of the same random-weight Llama the report wrote
(`device_report --keep-model DIR`). Prints one JSON object.

Usage: python3 scripts/cuda_peers.py MODEL_DIR [OUT.json]
"""
import json, sys, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}


def timed(f, reps=None):
    f(); torch.cuda.synchronize()
    t = time.perf_counter(); f(); torch.cuda.synchronize(); once = time.perf_counter() - t
    reps = reps or max(3, min(200, int(0.3 / max(once, 1e-6))))
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


mm = []
for dtype in (torch.float32, torch.float16):
    for n in (1024, 2048, 4096):
        a = torch.randn(n, n, device=dev, dtype=dtype); b = torch.randn(n, n, device=dev, dtype=dtype)
        s = timed(lambda: a @ b)
        mm.append({"dtype": str(dtype).split(".")[1], "n": n, "ms": s * 1e3, "gflops": 2 * n**3 / s / 1e9})
out["matmul"] = mm

n = 256 << 20
src = torch.ones(n // 4, device=dev); dst = torch.empty_like(src)
out["copy_gbs"] = 2 * n / timed(lambda: dst.copy_(src)) / 1e9
out["read_gbs"] = n / timed(lambda: src.sum()) / 1e9
mv = []
for dtype in (torch.float32, torch.float16):
    # Copies totalling 256 MiB, cycled, so no call finds its weights in L2 (as the report does).
    w0 = torch.randn(4096, 4096, device=dev, dtype=dtype); x = torch.randn(1, 4096, device=dev, dtype=dtype)
    ws = [w0.clone() for _ in range(-(-(256 << 20) // (w0.numel() * w0.element_size())))]
    it = [0]
    def step():
        it[0] += 1
        return x @ ws[it[0] % len(ws)].t()
    s = timed(step)
    mv.append({"dtype": str(dtype).split(".")[1], "us": s * 1e6, "gbs": w0.numel() * w0.element_size() / s / 1e9})
out["matvec"] = mv

if len(sys.argv) > 1:
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float16).to(dev).eval()
    prompt = (300 + (torch.arange(128) * 7919) % (m.config.vocab_size - 300)).view(1, -1).to(dev)
    dec = []
    with torch.no_grad():
        for new in (128,):
            m(prompt); torch.cuda.synchronize()
            t = time.perf_counter(); m(prompt); torch.cuda.synchronize(); pre = time.perf_counter() - t
            m.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize(); t = time.perf_counter()
            m.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize(); tot = time.perf_counter() - t
            dec.append({"prefill_tok_s": 128 / pre, "decode_tok_s": new / max(tot - pre, 1e-9), "new_tokens": new})
    out["transformers_f16_decode"] = dec

text = json.dumps(out, indent=1)
print(text)
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(text)
