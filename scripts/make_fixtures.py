"""Writes the tiny random language models of tests/models_*.rs with the `transformers`, `tokenizers`
and `gguf` packages, and what transformers computes on them (greedy ids, last-position logits).

    pip install torch transformers tokenizers gguf safetensors
    python3 scripts/make_fixtures.py            # writes tests/data/models/
    python3 scripts/make_fixtures.py qwen3 gemma2   # only those family fixtures
    python3 scripts/make_fixtures.py phi3_gguf gemma2_gguf gemma3_gguf   # the GGUF files of phi3, gemma2, gemma3

Every model is small (under 2 MB in all) and seeded, so rerunning gives the same files. The Rust
tests never need Python: they read the committed files."""
import json, os, shutil
import numpy as np, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, normalizers
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize, dequantize

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
TEXT = ("The quick brown fox jumps over the lazy dog. Tensors live on every GPU; caf\u00e9 na\u00efve "
        "r\u00e9sum\u00e9 \u00fcber \u4e2d\u6587 \U0001f600. ") * 20
PROMPT = "The quick fox caf\u00e9 \u4e2d"
NEW = 12


def byte_level_tokenizer():
    """GPT-2 / Llama 3 / Qwen style: byte-level pre-tokenizer and decoder."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], tr)
    return tok


def sentencepiece_tokenizer():
    """Llama 2 / Mistral style: Metaspace (U+2581) pieces with byte fallback."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    tr = trainers.BpeTrainer(vocab_size=330, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                             initial_alphabet=[], limit_alphabet=60)
    tok.train_from_iterator([TEXT.replace(" ", "\u2581")], tr)
    return tok


def greedy(model, ids, new):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
        logits = model(torch.tensor([ids])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
    return out[0, len(ids):].tolist(), logits.tolist(), float(top2[0] - top2[1])


def write_expected(d, tok, ids, model, extra=None):
    gen, logits, margin = greedy(model, ids, NEW)
    full = ids + gen
    with torch.no_grad():
        all_logits = model(torch.tensor([full])).logits[0]
    e = {"prompt": PROMPT, "prompt_ids": ids, "greedy_ids": gen, "last_logits": logits, "top2_margin": margin,
         # The logits at the last position of prompt + generated ids: checks decoding through the cache.
         "full_last_logits": all_logits[-1].tolist(), "decoded": tok.decode(gen)}
    if extra: e.update(extra)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(e, f)
    return e


def fresh(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
    return d


def scale_weights(model, std):
    """Wider random weights than the default 0.02, so greedy choices are not near-ties."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "ln_" in n:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = sentencepiece_tokenizer()
    d = fresh("llama")
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    scale_weights(m, 0.25)
    m.save_pretrained(d, safe_serialization=True)
    ids = tok.encode(PROMPT).ids
    write_expected(d, tok, ids, m)
    return m, cfg, tok, ids


def qwen2():
    """Qwen2: QKV bias, tied embeddings, rope_theta 1e6; stored in bf16 as two shards."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    tok = byte_level_tokenizer()
    d = fresh("qwen2")
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, eos_token_id=0)
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(cfg).eval()
    scale_weights(m, 0.3)
    m = m.to(torch.bfloat16)
    m.save_pretrained(d, safe_serialization=True, max_shard_size="20KB")
    # The reference: transformers loading the bf16 files in f32, as wgtensor loads them (an
    # in-memory `m.float()` would keep the RoPE frequencies rounded to bf16).
    m = Qwen2ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = tok.encode(PROMPT).ids
    write_expected(d, tok, ids, m)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    tok = byte_level_tokenizer()
    d = fresh("gpt2")
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    m = GPT2LMHeadModel(cfg).eval()
    scale_weights(m, 0.2)
    m.save_pretrained(d, safe_serialization=True)
    ids = tok.encode(PROMPT).ids
    write_expected(d, tok, ids, m)


def mistral():
    """Mistral with a sliding window of 6, shorter than the prompt: prefill and every decode step
    attend only to the last 6 positions (transformers: key j is seen by query i when
    i - 6 < j <= i). 30 greedy ids, so decode runs far past the window."""
    from transformers import MistralConfig, MistralForCausalLM
    tok = sentencepiece_tokenizer()
    d = fresh("mistral")
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = MistralConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=6, tie_word_embeddings=False,
                        bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    m = MistralForCausalLM(cfg).eval()
    scale_weights(m, 0.3)
    m.save_pretrained(d, safe_serialization=True)
    ids = tok.encode(PROMPT).ids
    assert len(ids) > cfg.sliding_window
    global NEW
    NEW, saved = 30, NEW
    try:
        write_expected(d, tok, ids, m)
    finally:
        NEW = saved


def qwen2_window():
    """Qwen2 with `use_sliding_window`: layer 0 full attention, layer 1 a window of 5
    (`max_window_layers` 1), so one model mixes both kinds of layer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    tok = sentencepiece_tokenizer()
    d = fresh("qwen2-window")
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=False, use_sliding_window=True, sliding_window=5,
                      max_window_layers=1, bos_token_id=1, eos_token_id=2)
    assert cfg.layer_types == ["full_attention", "sliding_attention"], cfg.layer_types
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(cfg).eval()
    scale_weights(m, 0.3)
    m.save_pretrained(d, safe_serialization=True)
    ids = tok.encode(PROMPT).ids
    global NEW
    NEW, saved = 30, NEW
    try:
        write_expected(d, tok, ids, m)
    finally:
        NEW = saved


def family_fixture(name, cls, cfg, tok, std=0.3, new=30, attn=None):
    """A tiny seeded model of one family with 30 greedy ids (decode well past any window);
    `attn` picks transformers' attention implementation for the reference (eager where the SDPA
    path would drop a soft-cap)."""
    d = fresh(name)
    tok.save(os.path.join(d, "tokenizer.json"))
    torch.manual_seed(0)
    m = cls(cfg).eval()
    scale_weights(m, std)
    m.save_pretrained(d, safe_serialization=True)
    kw = {"attn_implementation": attn} if attn else {}
    m = cls.from_pretrained(d, dtype=torch.float32, **kw).eval()
    ids = tok.encode(PROMPT).ids
    global NEW
    NEW, saved = new, NEW
    try:
        write_expected(d, tok, ids, m)
    finally:
        NEW = saved


def qwen3():
    """Qwen3: RMSNorm over each head's q and k before RoPE, head_dim 16 (not hidden / heads),
    tied embeddings."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    tok = byte_level_tokenizer()
    cfg = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, eos_token_id=0)
    family_fixture("qwen3", Qwen3ForCausalLM, cfg, tok)


def llama32():
    """Llama 3.2's shape: tied embeddings (no lm_head.weight in the file), llama3 RoPE scaling."""
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = byte_level_tokenizer()
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16})
    family_fixture("llama32-tied", LlamaForCausalLM, cfg, tok)


def gemma2():
    """Gemma 2: embedding times sqrt(hidden), (1 + w) RMSNorms around attention and MLP, GeGLU,
    query_pre_attn_scalar 24 (not head_dim), attention soft-cap 5 and final soft-cap 10 (small,
    so both bite), sliding window 5 on alternate layers. transformers' eager attention is the
    reference: its SDPA path drops the attention soft-cap."""
    from transformers import Gemma2Config, Gemma2ForCausalLM
    tok = sentencepiece_tokenizer()
    cfg = Gemma2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                       rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=5,
                       attn_logit_softcapping=5.0, final_logit_softcapping=10.0, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2)
    assert cfg.layer_types[:2] == ["sliding_attention", "full_attention"], cfg.layer_types
    family_fixture("gemma2", Gemma2ForCausalLM, cfg, tok, attn="eager")


def gemma3():
    """Gemma 3 text: q/k norms, local layers (window 5, RoPE base 10^4) and a global one (RoPE
    base 10^6, linear scaling 2)."""
    from transformers import Gemma3TextConfig, Gemma3ForCausalLM
    tok = sentencepiece_tokenizer()
    cfg = Gemma3TextConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=128, rms_norm_eps=1e-6, query_pre_attn_scalar=24,
                           sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                        "sliding_attention"],
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                               "rope_theta": 1000000.0}})
    family_fixture("gemma3", Gemma3ForCausalLM, cfg, tok)


def phi3():
    """Phi-3: fused qkv_proj and gate_up_proj, a sliding window of 6 on every layer."""
    from transformers import Phi3Config, Phi3ForCausalLM
    tok = sentencepiece_tokenizer()
    cfg = Phi3Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     original_max_position_embeddings=128, rms_norm_eps=1e-5, sliding_window=6,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    family_fixture("phi3", Phi3ForCausalLM, cfg, tok)


def qwen3_gguf():
    """The Qwen3 fixture above as an F32 GGUF file with llama.cpp's `qwen3` names and metadata
    (q/k rows in Hugging Face's order, as llama.cpp's converter keeps them for Qwen): its
    expectations are the directory's."""
    from safetensors.numpy import load_file
    d = os.path.join(OUT, "qwen3")
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = load_file(os.path.join(d, "model.safetensors"))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in [("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                       ("self_attn.o_proj", "attn_output"), ("self_attn.q_norm", "attn_q_norm"),
                       ("self_attn.k_norm", "attn_k_norm"), ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                       ("mlp.down_proj", "ffn_down"), ("input_layernorm", "attn_norm"),
                       ("post_attention_layernorm", "ffn_norm")]:
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    w = gguf.GGUFWriter(os.path.join(d, "model-f32.gguf"), "qwen3")
    w.add_context_length(cfg["max_position_embeddings"]); w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"]); w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"]); w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"]); w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"]); w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"]); w.add_file_type(0); w.add_eos_token_id(cfg["eos_token_id"])
    for k, a in sd.items():  # tied: the file has no output.weight
        w.add_tensor(names[k], np.ascontiguousarray(a.astype(np.float32)))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def hf_to_gguf(d, arch, meta, norm_shift=False):
    """`d`'s model.safetensors as an F32 GGUF file `model-f32.gguf` of llama.cpp architecture `arch`:
    tensor names from the gguf package's map (the one convert_hf_to_gguf.py uses), Gemma's `1 +
    weight` baked into every norm weight as that converter stores it (`norm_shift`), the metadata
    written by `meta(writer, config)`."""
    from safetensors.numpy import load_file
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = load_file(os.path.join(d, "model.safetensors"))
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg["num_hidden_layers"])
    w = gguf.GGUFWriter(os.path.join(d, "model-f32.gguf"), arch)
    w.add_context_length(cfg["max_position_embeddings"]); w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"]); w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"]); w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"]); w.add_vocab_size(cfg["vocab_size"]); w.add_file_type(0)
    w.add_bos_token_id(cfg["bos_token_id"]); w.add_eos_token_id(cfg["eos_token_id"])
    meta(w, cfg)
    for k, a in sd.items():
        name = tmap.get_name(k, try_suffixes=(".weight", ".bias"))
        assert name is not None, k
        a = a.astype(np.float32)
        if norm_shift and k.endswith("norm.weight"):
            a = a + np.float32(1.0)
        w.add_tensor(name, np.ascontiguousarray(a))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def phi3_gguf():
    """The Phi-3 fixture as llama.cpp's `phi3` F32 GGUF: fused `attn_qkv`, `ffn_up` holding gate
    and up, `attention.sliding_window` 6, `rope.scaling.original_context_length`."""
    def meta(w, cfg):
        w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
        w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
        w.add_rope_scaling_orig_ctx_len(cfg["rope_parameters"].get("original_max_position_embeddings",
                                                                   cfg["max_position_embeddings"]))
        w.add_sliding_window(cfg["sliding_window"] or 0)
    hf_to_gguf(os.path.join(OUT, "phi3"), "phi3", meta)


def gemma2_gguf():
    """Gemma 2 as llama.cpp's `gemma2` F32 GGUF: llama.cpp keeps no query_pre_attn_scalar (it
    scales by 1/sqrt(head_dim), or 1/sqrt(hidden / heads) for the 46-layer 27B), so this model's
    scalar is head_dim; soft-caps 5 and 10, window 5 on even layers (llama.cpp's pattern 2)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM
    tok = sentencepiece_tokenizer()
    cfg = Gemma2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                       rms_norm_eps=1e-6, query_pre_attn_scalar=16, sliding_window=5,
                       attn_logit_softcapping=5.0, final_logit_softcapping=10.0, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2)
    family_fixture("gemma2-gguf", Gemma2ForCausalLM, cfg, tok, attn="eager")

    def meta(w, cfg):
        w.add_key_length(cfg["head_dim"]); w.add_value_length(cfg["head_dim"])
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    hf_to_gguf(os.path.join(OUT, "gemma2-gguf"), "gemma2", meta, norm_shift=True)


def gemma3_gguf():
    """Gemma 3 text as llama.cpp's `gemma3` F32 GGUF: six layers in llama.cpp's fixed pattern
    (five local, window 5, RoPE base 10^4; the sixth global, `rope.freq_base` 10^6 with linear
    scaling 2), q/k norms, query_pre_attn_scalar = head_dim as llama.cpp assumes."""
    from transformers import Gemma3TextConfig, Gemma3ForCausalLM
    tok = sentencepiece_tokenizer()
    cfg = Gemma3TextConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                           num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           max_position_embeddings=128, rms_norm_eps=1e-6, query_pre_attn_scalar=16,
                           sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                               "rope_theta": 1000000.0}})
    assert cfg.layer_types == ["sliding_attention"] * 5 + ["full_attention"], cfg.layer_types
    family_fixture("gemma3-gguf", Gemma3ForCausalLM, cfg, tok)

    def meta(w, cfg):
        w.add_key_length(cfg["head_dim"]); w.add_value_length(cfg["head_dim"])
        full = cfg["rope_parameters"]["full_attention"]
        w.add_rope_freq_base(full["rope_theta"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR); w.add_rope_scaling_factor(full["factor"])
        w.add_sliding_window(cfg["sliding_window"])
    hf_to_gguf(os.path.join(OUT, "gemma3-gguf"), "gemma3", meta, norm_shift=True)


FAMILY_FIXTURES = {"qwen3": qwen3, "qwen3_gguf": qwen3_gguf, "llama32": llama32, "gemma2": gemma2, "gemma3": gemma3,
                   "phi3": phi3, "phi3_gguf": phi3_gguf, "gemma2_gguf": gemma2_gguf, "gemma3_gguf": gemma3_gguf}


GG = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
      "lm_head.weight": "output.weight"}
for hf, gg in [("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
               ("self_attn.o_proj", "attn_output"), ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
               ("mlp.down_proj", "ffn_down"), ("input_layernorm", "attn_norm"),
               ("post_attention_layernorm", "ffn_norm")]:
    for i in range(2):
        GG[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"


def permute(w, n):
    """llama.cpp's row order for q and k (convert_hf_to_gguf.py)."""
    return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_gguf(m, cfg, tok, ids):
    """The Llama above as GGUF F32, Q8_0 and Q4_0; for the quantized files the expectations come from
    transformers run on the dequantized weights."""
    from transformers import LlamaForCausalLM
    d = os.path.join(OUT, "llama")
    sd = {k: v.float().numpy() for k, v in m.state_dict().items()}
    for label, qt in [("f32", Q.F32), ("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0)]:
        path = os.path.join(d, f"model-{label}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_context_length(cfg.max_position_embeddings); w.add_embedding_length(cfg.hidden_size)
        w.add_block_count(cfg.num_hidden_layers); w.add_feed_forward_length(cfg.intermediate_size)
        w.add_head_count(cfg.num_attention_heads); w.add_head_count_kv(cfg.num_key_value_heads)
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps); w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
        w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads); w.add_vocab_size(cfg.vocab_size)
        rs = cfg.rope_parameters  # transformers 5 keeps rope_theta and rope_scaling here
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
        w.add_file_type(int({Q.F32: 0, Q.Q8_0: 7, Q.Q4_0: 2}[qt]))
        # llama.cpp stores Llama 3's rope scaling as a rope_freqs tensor: one divisor per frequency.
        hd = cfg.hidden_size // cfg.num_attention_heads
        base = 1.0 / (rs["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        scaled = m.model.rotary_emb.inv_freq.float()
        w.add_tensor("rope_freqs.weight", (base / scaled).numpy().astype(np.float32))
        w.add_bos_token_id(1); w.add_eos_token_id(2)
        deq = {}
        for hf, a in sd.items():
            g = GG[hf]
            if g.endswith("attn_q.weight"): a = permute(a, cfg.num_attention_heads)
            if g.endswith("attn_k.weight"): a = permute(a, cfg.num_key_value_heads)
            if qt != Q.F32 and a.ndim == 2:
                qa = quantize(a, qt)
                w.add_tensor(g, qa, raw_dtype=qt)
                back = dequantize(qa, qt).reshape(a.shape)
            else:
                w.add_tensor(g, np.ascontiguousarray(a))
                back = a
            if g.endswith("attn_q.weight"): back = unpermute(back, cfg.num_attention_heads)
            if g.endswith("attn_k.weight"): back = unpermute(back, cfg.num_key_value_heads)
            deq[hf] = torch.from_numpy(np.ascontiguousarray(back))
        w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
        mq = LlamaForCausalLM(cfg).eval()
        mq.load_state_dict(deq)
        gen, logits, margin = greedy(mq, ids, NEW)
        with open(os.path.join(d, f"expected-{label}.json"), "w") as f:
            json.dump({"prompt_ids": ids, "greedy_ids": gen, "last_logits": logits, "top2_margin": margin}, f)


def unpermute(w, n):
    return w.reshape(n, w.shape[0] // n // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] and all(a in FAMILY_FIXTURES for a in sys.argv[1:]):
        # Only the named family fixtures (python3 scripts/make_fixtures.py qwen3 gemma2 ...).
        for a in sys.argv[1:]:
            FAMILY_FIXTURES[a]()
        sys.exit(0)
    if sys.argv[1:] == ["windows"]:  # only the sliding-window fixtures
        mistral()
        qwen2_window()
        sys.exit(0)
    mistral()
    qwen2_window()
    m, cfg, tok, ids = llama()
    llama_gguf(m, cfg, tok, ids)
    qwen2()
    gpt2()
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT}: {total / 1e6:.2f} MB")
