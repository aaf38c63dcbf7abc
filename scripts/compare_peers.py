#!/usr/bin/env python3
"""wgtensor's CPU rows of `cargo bench --bench models` beside PyTorch's, interleaved row by row.

A measuring tool only (never a build or test dependency). On a shared machine timings swing by
up to 2x within minutes, so a whole run of one library and then the other can compare a slow
spell with a quiet one. This runs each row of each library in turn, ROUNDS times (default 3),
and prints per row the median of each library's medians and their ratio (PyTorch / wgtensor:
above 1 means wgtensor is faster):

    cargo bench --bench models --no-run
    python3 scripts/compare_peers.py [ROUNDS] [FILTER]

The bench binary is the newest `target/release/deps/models-*`; PyTorch comes from
`scripts/torch_peers.py` (`pip install torch`).
"""
import glob
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
FILTER = sys.argv[2] if len(sys.argv) > 2 else ""
ROWS = [
    "conv2d_fwd",
    "conv2d_fwd_wgrad",
    "sdpa_causal",
    "sdpa_causal_fwd_bwd",
    "sdpa_causal_16k",
    "layer_norm",
    "softmax",
    "cnn_digits_adam",
    "char_transformer_adamw",
    "mlp_adam",
    "tiny_add_x1000",
    "tiny_add_grad_x1000",
]
LINE = re.compile(r"^(\S+)/cpu: ([\d.]+) ms")


def bench_binary():
    found = [
        p
        for p in glob.glob(os.path.join(ROOT, "target/release/deps/models-*"))
        if os.access(p, os.X_OK) and not p.endswith(".d")
    ]
    if not found:
        sys.exit("no bench binary: run `cargo bench --bench models --no-run` first")
    return max(found, key=os.path.getmtime)


def median_of(cmd, row):
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout
    for line in out.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == row:
            return float(m.group(2))
    sys.exit(f"no figure for {row} from {' '.join(cmd)}:\n{out}")


def main():
    ours = bench_binary()
    peer = [sys.executable, os.path.join(ROOT, "scripts/torch_peers.py")]
    print(f"wgtensor {os.path.basename(ours)} against PyTorch, {ROUNDS} interleaved rounds a row")
    print(f"| row | wgtensor cpu ms | PyTorch cpu ms | ratio |")
    print(f"|---|---|---|---|")
    for row in ROWS:
        if FILTER not in row:
            continue
        a, b = [], []
        for _ in range(ROUNDS):
            a.append(median_of([ours, f"{row}/cpu"], row))
            b.append(median_of(peer + [f"{row}/cpu"], row))
        ma, mb = statistics.median(a), statistics.median(b)
        spread = f"{min(a):.3f}-{max(a):.3f} | {min(b):.3f}-{max(b):.3f}"
        print(f"| {row} | {ma:.3f} | {mb:.3f} | {mb / ma:.2f} |  ({spread})", flush=True)


if __name__ == "__main__":
    main()
