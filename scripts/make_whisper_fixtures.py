"""Writes the tiny random Whisper model of tests/models/whisper.rs with `transformers` and
`tokenizers`, the log-mel features `WhisperFeatureExtractor` computes for a synthetic chirp, and
the ids `WhisperForConditionalGeneration.generate` picks greedily.

    pip install torch transformers tokenizers numpy
    python3 scripts/make_whisper_fixtures.py     # writes tests/data/whisper/

`tiny/`: a Hugging Face directory (config.json, generation_config.json, model.safetensors in f32,
preprocessor_config.json, tokenizer.json) with a 96-token vocabulary (80 words, then Whisper's
special tokens: <|endoftext|> 80, <|startoftranscript|> 81, <|en|> 82, <|fr|> 83, <|translate|>
84, <|transcribe|> 85, <|startoflm|> 86, <|startofprev|> 87, <|nospeech|> 88, <|notimestamps|>
89, timestamps 90..95), two encoder and two decoder layers, d_model 32 (the encoder still takes
the full 3000 frames: its position table has 1500 rows).

`expected.json`: for every signal (`signal()` below, rebuilt bit for bit by the Rust test) and
every generation-config variant, the ids generate returns: `windows`, the sequences of
`generate(..., return_dict_in_generate=True)` (prompt, new tokens, end of text), and `ids`, what
a plain `generate` call returns (the new tokens only), concatenated over the windows. Audio longer than 30 s is cut into
consecutive 30-s windows, each passed to generate on its own (transformers' own long-form path
needs timestamp tokens; wgtensor transcribes window by window without them), so the expected ids
of a long signal are one list per window.

`features_{80,128}.bin`: the features of the 2-s chirp (little-endian f32, [mels, FRAMES], the
first FRAMES of the 3000 frames; the rest is the padding floor, stored in expected.json).
Seeded, so rerunning gives the same files; the Rust tests never need Python."""
import json, math, os, struct
import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "whisper")
SR = 16000
FRAMES = 220  # stored feature frames: the 2-s chirp is 200 frames
WORDS = 80
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
SPECIALS += [f"<|{0.02 * i:.2f}|>" for i in range(6)]
VOCAB = WORDS + len(SPECIALS)


def chirp(sr, seconds=2.0, f0=100.0, f1=3000.0):
    """A linear chirp from f0 to f1 Hz, amplitude 0.5, 50-ms raised-cosine fades: below 4 kHz, so
    8-kHz audio carries it whole. f64, as the Rust test computes it."""
    n = int(round(seconds * sr))
    t = np.arange(n, dtype=np.float64) / sr
    k = (f1 - f0) / seconds
    x = 0.5 * np.sin(2 * np.pi * (f0 * t + 0.5 * k * t * t))
    fade = np.minimum(1.0, np.minimum(t, seconds - t) / 0.05)
    return x * (0.5 - 0.5 * np.cos(np.pi * fade))


def signal(seconds):
    """The model tests' input at 16 kHz: two gliding tones plus a deterministic pseudo-noise,
    changing every 1.3 s so the decoder sees different frames. f64, as the Rust test computes
    it."""
    n = int(seconds * SR)
    i = np.arange(n, dtype=np.float64)
    t = i / SR
    seg = np.floor(t / 1.3)
    f = 200.0 + 150.0 * np.mod(seg * 7.0, 11.0)
    x = 0.3 * np.sin(2 * np.pi * f * t) + 0.2 * np.sin(2 * np.pi * (0.5 * f + 40.0 * seg) * t * 1.5)
    noise = np.sin(i * 12.9898 + 78.233) * 43758.5453
    noise = noise - np.floor(noise)
    return x + 0.05 * (noise - 0.5)


def tokenizer():
    vocab = {f"w{i}": i for i in range(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.add_special_tokens(SPECIALS)
    assert tok.get_vocab_size() == VOCAB
    return tok


def generation_config(variant):
    g = GenerationConfig(
        decoder_start_token_id=81, eos_token_id=80, pad_token_id=80, bos_token_id=80,
        max_length=24, no_timestamps_token_id=89, is_multilingual=True,
        lang_to_id={"<|en|>": 82, "<|fr|>": 83}, task_to_id={"translate": 84, "transcribe": 85},
        suppress_tokens=[1, 2, 7, 11, 86, 87], begin_suppress_tokens=[3, 80])
    if variant == "language":  # what generation_config.json holds
        g.language, g.task = "<|en|>", "transcribe"
    elif variant == "forced":  # old checkpoints: forced_decoder_ids only
        g.forced_decoder_ids = [[1, 83], [2, 84], [3, 89]]
    elif variant == "detect":  # no language: generate detects one among lang_to_id
        g.task = "transcribe"
    elif variant == "eos":  # a common token as end of text, so decoding stops early
        g.language, g.task, g.eos_token_id = "<|en|>", "transcribe", 45
    return g


def features(fe, x):
    return fe(x.astype(np.float32), sampling_rate=SR, return_tensors="np").input_features[0]


def main():
    torch.manual_seed(0)
    os.makedirs(os.path.join(OUT, "tiny"), exist_ok=True)
    cfg = WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=1500, max_target_positions=32, decoder_start_token_id=81,
        eos_token_id=80, pad_token_id=80, bos_token_id=80, suppress_tokens=None,
        begin_suppress_tokens=None, activation_function="gelu", tie_word_embeddings=True)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # wider than the default 0.02 so greedy picks have clear margins
        for name, p in model.named_parameters():
            if "embed_positions" in name and "encoder" in name:
                continue  # the sinusoidal table
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
            elif "layer_norm" in name and name.endswith("weight"):
                p.uniform_(0.8, 1.2)
            else:
                p.uniform_(-0.1, 0.1)
    model.generation_config = generation_config("language")
    model.save_pretrained(os.path.join(OUT, "tiny"), safe_serialization=True)
    tokenizer().save(os.path.join(OUT, "tiny", "tokenizer.json"))
    fe = WhisperFeatureExtractor(feature_size=80)
    fe.save_pretrained(os.path.join(OUT, "tiny"))
    assert os.path.isfile(os.path.join(OUT, "tiny", "preprocessor_config.json"))

    expected = {"signals": {}, "features": {}}
    # Features of the chirp (80 and 128 mels), and the difference between the extractor's torch
    # path and its float64 numpy path: the float32 noise floor the Rust test can be held to.
    x = chirp(SR)
    for mels in (80, 128):
        fx = WhisperFeatureExtractor(feature_size=mels)
        f = features(fx, x)
        f64 = fx._np_extract_fbank_features(
            np.pad(x.astype(np.float32), (0, 480000 - len(x)))[None], "cpu")[0]
        floor = float(f[:, -1].max())
        assert np.all(f[:, FRAMES:] == floor), "frames past FRAMES are the padding floor"
        with open(os.path.join(OUT, f"features_{mels}.bin"), "wb") as fh:
            fh.write(np.ascontiguousarray(f[:, :FRAMES], dtype="<f4").tobytes())
        expected["features"][str(mels)] = {"frames": FRAMES, "floor": floor,
                                           "torch_vs_numpy": float(np.abs(f - f64).max())}

    tok = tokenizer()
    for name, seconds in (("short", 7.0), ("long", 45.0)):
        sig = signal(seconds)
        per = {}
        for variant in ("language", "forced", "detect", "eos"):
            if name == "long" and variant != "language":
                continue
            windows, margins, plain = [], [], []
            for start in range(0, len(sig), 480000):
                f = features(fe, sig[start:start + 480000])
                # generate merges a passed config with the model's own: set the model's instead.
                model.generation_config = generation_config(variant)
                out = model.generate(torch.from_numpy(f)[None], output_scores=True,
                                     return_dict_in_generate=True)
                ids = out.sequences[0].tolist()
                for s in out.scores:
                    top = torch.topk(s[0].float(), 2).values
                    margins.append(float(top[0] - top[1]))
                windows.append(ids)
                # Without return_dict_in_generate, generate returns the new tokens only: no
                # prompt, no end of text.
                plain.extend(model.generate(torch.from_numpy(f)[None])[0].tolist())
            texts = (tok.decode(w, skip_special_tokens=True).strip() for w in windows)
            text = " ".join(t for t in texts if t)
            per[variant] = {"windows": windows, "ids": plain, "text": text, "min_margin": min(margins)}
            print(name, variant, windows, "min top-2 margin", min(margins))
        expected["signals"][name] = {"seconds": seconds, "variants": per}
    with open(os.path.join(OUT, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1)
    print(json.dumps(expected["features"]))


if __name__ == "__main__":
    main()
