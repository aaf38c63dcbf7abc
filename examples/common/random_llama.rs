//! The random-weight Llama of `examples/make_model.rs` and `examples/device_report.rs`: a Hugging
//! Face directory (`config.json`, `model.safetensors`, a byte-level `tokenizer.json`, a
//! `tokenizer_config.json` with a small chat template) and, on
//! request, llama.cpp files beside it (`model-<type>.gguf`, q/k rows permuted as llama.cpp stores
//! them). Shared by both examples through `#[path]`, so the benchmarks and the report measure the
//! same model.
#![allow(dead_code)]

use std::path::Path;
use wgtensor::models::gguf::{GgufValue, GgufWriter};
use wgtensor::{DType, Device, QTensor, QType, Result, Tensor};

/// The sizes of a Llama-architecture model.
pub struct Preset {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub inter: usize,
    pub ctx: usize,
}

impl Preset {
    /// `tiny` (2 layers, hidden 64), `125m` (the benchmarks' model) or `1b` (Llama 3.2 1B's
    /// shape: 16 layers, hidden 2048, vocabulary 128,256).
    pub fn named(name: &str) -> Option<Preset> {
        let p = |vocab, hidden, layers, heads, kv_heads, inter, ctx| Preset {
            vocab,
            hidden,
            layers,
            heads,
            kv_heads,
            inter,
            ctx,
        };
        match name {
            "tiny" => Some(p(512, 64, 2, 4, 2, 128, 256)),
            "125m" => Some(p(32000, 768, 12, 12, 4, 2048, 1024)),
            "1b" => Some(p(128_256, 2048, 16, 32, 8, 8192, 2048)),
            _ => None,
        }
    }

    /// Parameters of the matrices (embedding and output included).
    pub fn parameters(&self) -> usize {
        let hd = self.hidden / self.heads;
        let attn = 2 * self.hidden * self.heads * hd + 2 * self.hidden * self.kv_heads * hd;
        let mlp = 3 * self.hidden * self.inter;
        2 * self.vocab * self.hidden + self.layers * (attn + mlp)
    }
}

/// GPT-2's byte -> printable character table of byte-level BPE.
fn byte_chars() -> Vec<char> {
    let mut direct: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut map = vec!['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        map[b as usize] = if direct.contains(&b) {
            char::from_u32(b).unwrap_or('?')
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('?')
        };
    }
    direct.clear();
    map
}

/// A byte-level BPE `tokenizer.json` of `vocab` entries: the 256 bytes, an end-of-text token,
/// then the bigrams of common English letters (merged by BPE) until the vocabulary is full.
fn tokenizer_json(vocab: usize) -> String {
    let chars = byte_chars();
    let mut entries: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    entries.push("<|endoftext|>".into());
    let mut merges: Vec<(String, String)> = Vec::new();
    let letters = " etaoinshrdlucmfwypvbgk";
    'fill: for a in letters.chars() {
        for b in letters.chars() {
            if entries.len() >= vocab {
                break 'fill;
            }
            let (x, y) = (chars[a as usize].to_string(), chars[b as usize].to_string());
            entries.push(format!("{x}{y}"));
            merges.push((x, y));
        }
    }
    let mut i = 0;
    while entries.len() < vocab {
        entries.push(format!("<unused_{i}>"));
        i += 1;
    }
    let vocab_json: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::Value::from(i)))
        .collect();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab_json, "merges": merges.iter().map(|(a, b)| vec![a, b]).collect::<Vec<_>>()}
    });
    tok.to_string()
}

/// llama.cpp's row order of the q and k projections (`permute` of convert_hf_to_gguf.py).
fn permute(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = (w.shape()[0], w.shape()[1]);
    w.reshape(&[heads, 2, rows / heads / 2, cols])?
        .permute(&[0, 2, 1, 3])?
        .contiguous()?
        .reshape(&[rows, cols])
}

/// The file name of a GGUF written for `qtype` (`None`: f32): `model-q8_0.gguf`, `model-f32.gguf`.
pub fn gguf_name(qtype: Option<QType>) -> String {
    let label = qtype.map_or("f32".to_string(), |q| format!("{q:?}").to_lowercase());
    format!("model-{label}.gguf")
}

/// Writes the model with random weights (`seed`) into `out`: the Hugging Face directory, and one
/// GGUF file per entry of `ggufs` (`None`: f32 matrices).
pub fn write(
    out: &Path,
    p: &Preset,
    ggufs: &[Option<QType>],
    seed: u64,
) -> std::result::Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let e = |e: wgtensor::Error| e.to_string();
    wgtensor::manual_seed(seed);
    let cpu = Device::cpu();
    let hd = p.hidden / p.heads;
    let matrix = |rows: usize, cols: usize| -> Result<Tensor> {
        Tensor::randn(&[rows, cols], &cpu)?.mul_scalar(0.02)
    };
    let ones = |n: usize| Tensor::ones(&[n], DType::F32, &cpu);
    // (Hugging Face name, llama.cpp name, tensor, q/k heads to permute for llama.cpp)
    let mut tensors: Vec<(String, String, Tensor, Option<usize>)> = Vec::new();
    tensors.push((
        "model.embed_tokens.weight".into(),
        "token_embd.weight".into(),
        matrix(p.vocab, p.hidden).map_err(e)?,
        None,
    ));
    for i in 0..p.layers {
        let (h, g) = (format!("model.layers.{i}"), format!("blk.{i}"));
        let layer = [
            (
                "self_attn.q_proj.weight",
                "attn_q.weight",
                p.heads * hd,
                p.hidden,
                Some(p.heads),
            ),
            (
                "self_attn.k_proj.weight",
                "attn_k.weight",
                p.kv_heads * hd,
                p.hidden,
                Some(p.kv_heads),
            ),
            (
                "self_attn.v_proj.weight",
                "attn_v.weight",
                p.kv_heads * hd,
                p.hidden,
                None,
            ),
            (
                "self_attn.o_proj.weight",
                "attn_output.weight",
                p.hidden,
                p.heads * hd,
                None,
            ),
            (
                "mlp.gate_proj.weight",
                "ffn_gate.weight",
                p.inter,
                p.hidden,
                None,
            ),
            (
                "mlp.up_proj.weight",
                "ffn_up.weight",
                p.inter,
                p.hidden,
                None,
            ),
            (
                "mlp.down_proj.weight",
                "ffn_down.weight",
                p.hidden,
                p.inter,
                None,
            ),
        ];
        for (hn, gn, r, c, perm) in layer {
            tensors.push((
                format!("{h}.{hn}"),
                format!("{g}.{gn}"),
                matrix(r, c).map_err(e)?,
                perm,
            ));
        }
        tensors.push((
            format!("{h}.input_layernorm.weight"),
            format!("{g}.attn_norm.weight"),
            ones(p.hidden).map_err(e)?,
            None,
        ));
        tensors.push((
            format!("{h}.post_attention_layernorm.weight"),
            format!("{g}.ffn_norm.weight"),
            ones(p.hidden).map_err(e)?,
            None,
        ));
    }
    tensors.push((
        "model.norm.weight".into(),
        "output_norm.weight".into(),
        ones(p.hidden).map_err(e)?,
        None,
    ));
    tensors.push((
        "lm_head.weight".into(),
        "output.weight".into(),
        matrix(p.vocab, p.hidden).map_err(e)?,
        None,
    ));

    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": p.vocab,
        "hidden_size": p.hidden, "intermediate_size": p.inter, "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads, "num_key_value_heads": p.kv_heads, "max_position_embeddings": p.ctx,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
        "bos_token_id": 256, "eos_token_id": 256, "hidden_act": "silu", "torch_dtype": "float32"
    });
    let write = |name: &str, text: String| {
        std::fs::write(out.join(name), text)
            .map_err(|err| format!("{}: {err}", out.join(name).display()))
    };
    write(
        "config.json",
        serde_json::to_string_pretty(&config).unwrap_or_default(),
    )?;
    write("tokenizer.json", tokenizer_json(p.vocab))?;
    // A small chat template, so that `generate --chat` runs on the directory.
    let template = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{{ eos_token }}\n\
                    {% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
    let tokenizer_config = serde_json::json!({
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "chat_template": template
    });
    write(
        "tokenizer_config.json",
        serde_json::to_string_pretty(&tokenizer_config).unwrap_or_default(),
    )?;
    let named: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, _, t, _)| (n.clone(), t.clone()))
        .collect();
    wgtensor::nn::save_safetensors(out.join("model.safetensors"), &named).map_err(e)?;

    for &q in ggufs {
        let mut w = GgufWriter::new();
        let u32v = |x: usize| GgufValue::U32(x as u32);
        w.add_metadata("general.architecture", GgufValue::String("llama".into()));
        w.add_metadata("llama.context_length", u32v(p.ctx));
        w.add_metadata("llama.embedding_length", u32v(p.hidden));
        w.add_metadata("llama.block_count", u32v(p.layers));
        w.add_metadata("llama.feed_forward_length", u32v(p.inter));
        w.add_metadata("llama.attention.head_count", u32v(p.heads));
        w.add_metadata("llama.attention.head_count_kv", u32v(p.kv_heads));
        w.add_metadata(
            "llama.attention.layer_norm_rms_epsilon",
            GgufValue::F32(1e-5),
        );
        w.add_metadata("llama.rope.freq_base", GgufValue::F32(10000.0));
        w.add_metadata("llama.rope.dimension_count", u32v(hd));
        w.add_metadata("tokenizer.ggml.bos_token_id", u32v(256));
        w.add_metadata("tokenizer.ggml.eos_token_id", u32v(256));
        for (_, gname, t, perm) in &tensors {
            let t = match perm {
                Some(heads) => permute(t, *heads).map_err(e)?,
                None => t.clone(),
            };
            match q {
                Some(qt) if t.ndim() == 2 => w
                    .add_qtensor(gname, &QTensor::quantize(&t, qt).map_err(e)?)
                    .map_err(e)?,
                _ => w.add_tensor(gname, &t).map_err(e)?,
            }
        }
        let path = out.join(gguf_name(q));
        std::fs::write(&path, w.to_bytes()).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    Ok(())
}
