"""The peer of `examples/transcribe --bench`: a Whisper-tiny-sized random model (d_model 384,
4 + 4 layers, 6 heads, ffn 1536, 80 mels, the real 51,865-token vocabulary and special ids) and
30 s of audio, transcribed by transformers on PyTorch (CPU): the feature extractor, the encoder
and 32 greedy tokens after the 4-token prompt (end of text is suppressed so every run decodes
exactly 32).

    python3 scripts/whisper_peer.py --out /tmp/whisper-bench [--runs 5]
    cargo run --release --features models --example transcribe -- \\
        --model /tmp/whisper-bench --audio /tmp/whisper-bench/speech30.wav --device cpu --ids --bench 5

Prints `peer: X ms per transcription (transformers T, torch V, N threads)` and the ids, which
the example's `ids:` line must equal (the model's margins are wide; f32 on both sides)."""
import argparse, os, statistics, time, wave
import numpy as np
import torch
import transformers
from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/whisper-bench")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    cfg = WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=384, encoder_layers=4,
                        decoder_layers=4, encoder_attention_heads=6, decoder_attention_heads=6,
                        encoder_ffn_dim=1536, decoder_ffn_dim=1536, max_source_positions=1500,
                        max_target_positions=448, decoder_start_token_id=50258, eos_token_id=50257,
                        pad_token_id=50257, bos_token_id=50257, suppress_tokens=None,
                        begin_suppress_tokens=None)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "embed_positions" not in name:
                p.normal_(0.0, 0.1)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257, bos_token_id=50257,
        max_new_tokens=32, no_timestamps_token_id=50363, is_multilingual=True,
        lang_to_id={"<|en|>": 50259}, task_to_id={"transcribe": 50359, "translate": 50358},
        language="<|en|>", task="transcribe", suppress_tokens=[50257, 50360, 50361, 50362],
        begin_suppress_tokens=[220])
    model.save_pretrained(a.out, safe_serialization=True)
    fe = WhisperFeatureExtractor(feature_size=80)
    fe.save_pretrained(a.out)
    # 30 s of gliding tones and noise, 16-bit mono at 16 kHz.
    t = np.arange(30 * 16000) / 16000.0
    x = 0.3 * np.sin(2 * np.pi * (200 + 30 * t) * t) + 0.05 * np.random.default_rng(0).standard_normal(t.size)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2")
    with wave.open(os.path.join(a.out, "speech30.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(pcm.tobytes())
    samples = pcm.astype(np.float32) / 32768.0

    def run():
        f = fe(samples, sampling_rate=16000, return_tensors="pt").input_features
        with torch.inference_mode():
            return model.generate(f)[0].tolist()

    ids = run()  # warm-up
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    print(f"peer: {statistics.median(times):.1f} ms per transcription (transformers {transformers.__version__}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {a.runs})")
    print(f"ids: {ids}")


if __name__ == "__main__":
    main()
