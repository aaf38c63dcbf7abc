#!/usr/bin/env python3
"""PyTorch's figures for the rows of `cargo bench --bench models`, printed under the same names.

A measuring tool only (never a build or test dependency): `pip install torch`, then
`python3 scripts/torch_peers.py [FILTER]`. Eager PyTorch on the CPU with 2 threads, the same
shapes; each row runs 3 warm-up rounds, then prints the median (and range) of 9 timed rounds.
A round ends with one element of the result read, as in the Rust bench.
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)
FILTER = sys.argv[1] if len(sys.argv) > 1 else ""


def timed(row, fn, warm=3, n=9):
    name = f"{row}/cpu"
    if FILTER not in name:
        return
    ms = []
    for i in range(warm + n):
        t0 = time.perf_counter()
        fn()
        if i >= warm:
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    print(f"{name}: {ms[n // 2]:.3f} ms (min {ms[0]:.3f}, max {ms[-1]:.3f}, {n} rounds) [pytorch {torch.__version__}]")


def settle(t):
    float(t.detach().reshape(-1)[0])


def conv():
    torch.manual_seed(0)
    x = torch.randn(8, 32, 32, 32)
    w = (torch.randn(32, 32, 3, 3) * 0.05).requires_grad_(True)

    def fwd():
        with torch.no_grad():
            settle(F.conv2d(x, w, padding=1))

    def wgrad():
        w.grad = None
        F.conv2d(x, w, padding=1).sum().backward()
        settle(w.grad)

    timed("conv2d_fwd", fwd)
    timed("conv2d_fwd_wgrad", wgrad)


def sdpa():
    q, k, v = (torch.randn(4, 256, 64) for _ in range(3))

    def fwd():
        with torch.no_grad():
            settle(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    timed("sdpa_causal", fwd)

    qg = q.clone().requires_grad_(True)

    def fwd_bwd():
        qg.grad = None
        F.scaled_dot_product_attention(qg, k, v, is_causal=True).sum().backward()
        settle(qg.grad)

    timed("sdpa_causal_fwd_bwd", fwd_bwd)

    x = torch.randn(1, 16384, 64)

    def long():
        with torch.no_grad():
            settle(F.scaled_dot_product_attention(x, x, x, is_causal=True))

    timed("sdpa_causal_16k", long)


def rows():
    x = torch.randn(4096, 1024)
    w, b = torch.randn(1024), torch.randn(1024)

    def ln():
        with torch.no_grad():
            settle(F.layer_norm(x, (1024,), w, b, 1e-5))

    def sm():
        with torch.no_grad():
            settle(torch.softmax(x, -1))

    timed("layer_norm", ln)
    timed("softmax", sm)


def step(model, opt, x, y, reshape=None):
    def run():
        opt.zero_grad()
        out = model(x)
        if reshape:
            out = out.reshape(reshape)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        settle(loss)

    return run


def cnn():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
    x = torch.rand(64, 1, 8, 8)
    y = torch.arange(64) % 10
    timed("cnn_digits_adam", step(model, torch.optim.Adam(model.parameters(), 3e-3), x, y))


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, l, e = x.shape
        q, k, v = self.in_proj(x).split(e, dim=-1)
        split = lambda t: t.reshape(n, l, self.heads, e // self.heads).transpose(1, 2)
        o = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        return self.out_proj(o.transpose(1, 2).reshape(n, l, e))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim)
        self.fc, self.proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, block, dim, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.blocks = nn.Sequential(*[Block(dim, 4) for _ in range(layers)])
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)
        self.register_buffer("positions", torch.arange(block))

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        return self.head(self.ln_f(self.blocks(x)))


def transformer():
    torch.manual_seed(0)
    vocab, block, dim, batch = 65, 64, 64, 32
    model = Gpt(vocab, block, dim, 2)
    ids = (torch.arange(batch * block) * 7) % vocab
    x = ids.reshape(batch, block)
    y = (ids + 1) % 65
    opt = torch.optim.AdamW(model.parameters(), 3e-3, weight_decay=0.01)
    timed("char_transformer_adamw", step(model, opt, x, y, reshape=(batch * block, vocab)))


def mlp():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(128, 784)
    y = torch.arange(128) % 10
    timed("mlp_adam", step(model, torch.optim.Adam(model.parameters(), 1e-3), x, y))


def tiny():
    # Per-op overhead: 1,000 adds of 16 elements per round (the row's ms are µs per add),
    # plain and with a tensor that requires grad (the autograd record).
    a = torch.randn(16)
    b = torch.randn(16)
    w = torch.randn(16, requires_grad=True)

    def adds(x):
        def run():
            y = a
            for _ in range(1000):
                y = x + b
            settle(y)
        return run

    timed("tiny_add_x1000", adds(a))
    timed("tiny_add_grad_x1000", adds(w))


if __name__ == "__main__":
    for run in (conv, sdpa, rows, cnn, transformer, mlp, tiny):
        run()
