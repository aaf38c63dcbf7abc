"""Writes tests/data/tiny.safetensors with the Python `safetensors` package (the reference
implementation), for tests/safetensors.rs. Run: pip install safetensors numpy; python3 this.py

Contents (asserted by the test):
  "encoder.layer.0.weight": f32 [2, 3] = 0.5 * arange(6) - 1
  "encoder.layer.0.bias":   f32 [3]    = [0.25, -0.5, 1e-3]
  "half.scale":             f16 [4]    = [1, -2, 0.5, 65504]
  "ids":                    i32 [2, 2] = [[0, 7], [-3, 2147483647]]
and the metadata {"format": "pt"} that PyTorch exports carry.
"""
import os

import numpy as np
from safetensors.numpy import save_file

here = os.path.dirname(os.path.abspath(__file__))
tensors = {
    "encoder.layer.0.weight": (0.5 * np.arange(6, dtype=np.float32) - 1).reshape(2, 3),
    "encoder.layer.0.bias": np.array([0.25, -0.5, 1e-3], dtype=np.float32),
    "half.scale": np.array([1, -2, 0.5, 65504], dtype=np.float16),
    "ids": np.array([[0, 7], [-3, 2147483647]], dtype=np.int32),
}
save_file(tensors, os.path.join(here, "tiny.safetensors"), metadata={"format": "pt"})
