//! The fused decode attention (`Tensor::attention_decode`, shaders/attention_decode.wgsl)
//! against composed attention on the CPU, on the CPU and every adapter: edge lengths around
//! the 64-position tile, grouped-query heads, head sizes up to 256, NaN, bad arguments.

use crate::common;

use common::{assert_close, data, devices};
use wgtensor::{Device, Tensor};

/// softmax(q kᵀ · scale) v over the first `len` cache positions, composed from plain ops on
/// the CPU: `q` `[h, d]`, caches `[cap, kvh, d]`.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    h: usize,
    kvh: usize,
    d: usize,
    cap: usize,
    len: usize,
    scale: f32,
) -> Vec<f32> {
    let cpu = Device::cpu();
    let q = Tensor::from_vec(q.to_vec(), &[h, 1, d], &cpu).unwrap();
    let heads = |t: &[f32]| {
        let t = Tensor::from_vec(t.to_vec(), &[cap, kvh, d], &cpu).unwrap();
        t.narrow(0, 0, len)
            .unwrap()
            .permute(&[1, 0, 2])
            .unwrap()
            .unsqueeze(1)
            .unwrap()
            .expand(&[kvh, h / kvh, len, d])
            .unwrap()
            .reshape(&[h, len, d])
            .unwrap()
    };
    let out = Tensor::scaled_dot_product_attention(
        &q,
        &heads(k),
        &heads(v),
        None,
        false,
        0.0,
        Some(scale),
    )
    .unwrap();
    out.to_vec::<f32>().unwrap()
}

#[test]
fn fused_decode_attention_matches_composed() {
    let cases = [
        // (heads, kv_heads, head_dim, capacity, len)
        (1, 1, 1, 1, 1),
        (4, 2, 16, 70, 1),
        (4, 2, 16, 70, 63),
        (4, 2, 16, 70, 64),
        (4, 2, 16, 70, 65),
        (6, 2, 64, 200, 129),
        (3, 3, 256, 80, 80),
        (2, 1, 100, 10, 7),
        (12, 4, 64, 300, 300),
    ];
    for dev in devices() {
        for (i, &(h, kvh, d, cap, len)) in cases.iter().enumerate() {
            let q = data(h * d, 3 * i as u64 + 1, 1.0);
            let k = data(cap * kvh * d, 3 * i as u64 + 2, 1.0);
            let v = data(cap * kvh * d, 3 * i as u64 + 3, 1.0);
            let scale = 1.0 / (d as f32).sqrt();
            let want = reference(&q, &k, &v, h, kvh, d, cap, len, scale);
            let t = |x: &[f32], s: &[usize]| Tensor::from_vec(x.to_vec(), s, &dev).unwrap();
            let got = Tensor::attention_decode(
                &t(&q, &[h, d]),
                &t(&k, &[cap, kvh, d]),
                &t(&v, &[cap, kvh, d]),
                len,
                scale,
            )
            .unwrap();
            assert_eq!(got.shape(), &[h, d]);
            let ctx =
                format!("attention_decode h={h} kvh={kvh} d={d} cap={cap} len={len} on {dev}");
            assert_close(&got.to_vec::<f32>().unwrap(), &want, 1e-5, 1e-5, &ctx);
        }
    }
}

/// Positions past `len` are never read: garbage (NaN) there changes nothing; a NaN inside the
/// attended range makes the head NaN, as in composed attention.
#[test]
fn decode_attention_reads_only_len_positions_and_propagates_nan() {
    for dev in devices() {
        let (h, kvh, d, cap, len) = (2, 1, 8, 80, 70);
        let q = data(h * d, 1, 1.0);
        let mut k = data(cap * kvh * d, 2, 1.0);
        let v = data(cap * kvh * d, 3, 1.0);
        for x in &mut k[len * kvh * d..] {
            *x = f32::NAN;
        }
        let t = |x: &[f32], s: &[usize]| Tensor::from_vec(x.to_vec(), s, &dev).unwrap();
        let got = Tensor::attention_decode(
            &t(&q, &[h, d]),
            &t(&k, &[cap, kvh, d]),
            &t(&v, &[cap, kvh, d]),
            len,
            0.3,
        )
        .unwrap();
        let got = got.to_vec::<f32>().unwrap();
        assert!(got.iter().all(|x| x.is_finite()), "{dev}: read past len");
        k[5] = f32::NAN;
        let got = Tensor::attention_decode(
            &t(&q, &[h, d]),
            &t(&k, &[cap, kvh, d]),
            &t(&v, &[cap, kvh, d]),
            len,
            0.3,
        )
        .unwrap();
        let got = got.to_vec::<f32>().unwrap();
        assert!(
            got.iter().all(|x| x.is_nan()),
            "{dev}: NaN did not propagate: {got:?}"
        );
    }
}

#[test]
fn decode_attention_rejects_bad_arguments() {
    let d = Device::cpu();
    let z = |s: &[usize]| Tensor::zeros(s, wgtensor::DType::F32, &d).unwrap();
    let (q, k) = (z(&[4, 8]), z(&[16, 2, 8]));
    assert!(Tensor::attention_decode(&q, &k, &k, 0, 1.0).is_err());
    assert!(Tensor::attention_decode(&q, &k, &k, 17, 1.0).is_err());
    assert!(Tensor::attention_decode(&z(&[3, 8]), &k, &k, 4, 1.0).is_err());
    assert!(Tensor::attention_decode(&z(&[4, 7]), &k, &k, 4, 1.0).is_err());
    assert!(
        Tensor::attention_decode(&z(&[2, 300]), &z(&[4, 1, 300]), &z(&[4, 1, 300]), 4, 1.0)
            .is_err()
    );
    let f16 = q.to_dtype(wgtensor::DType::F16).unwrap();
    assert!(Tensor::attention_decode(&f16, &k, &k, 4, 1.0).is_err());
}

/// A model's output / embedding matrix past one GPU storage binding (32,000 x 1,100 f32,
/// 134 MiB): `Weight::matmul_t` of one and of three rows and `Weight::rows` (an embedding
/// lookup) on every adapter equal the CPU's.
#[test]
fn weight_past_one_binding_multiplies_and_gathers() {
    use wgtensor::models::Weight;
    let (rows, cols) = (32_000, 1_100);
    let host: Vec<f32> = (0..rows * cols)
        .map(|i| ((i % 4099) as f32 - 2049.0) / 8192.0)
        .collect();
    let cpu = Weight::Dense(Tensor::from_vec(host.clone(), &[rows, cols], &Device::cpu()).unwrap());
    for d in common::gpus() {
        let w = Weight::Dense(Tensor::from_vec(host.clone(), &[rows, cols], &d).unwrap());
        for n in [1, 3] {
            let x = data(n * cols, 7, 1.0);
            let got = w
                .matmul_t(&Tensor::from_vec(x.clone(), &[n, cols], &d).unwrap())
                .unwrap();
            let want = cpu
                .matmul_t(&Tensor::from_vec(x, &[n, cols], &Device::cpu()).unwrap())
                .unwrap();
            assert_close(
                &got.to_vec::<f32>().unwrap(),
                &want.to_vec::<f32>().unwrap(),
                1e-3,
                1e-3,
                &format!("Weight::matmul_t of {n} rows on {d}"),
            );
        }
        let ids = [5u32, 31_999, 0, 12_345];
        assert_eq!(
            w.rows(&ids).unwrap().to_vec::<f32>().unwrap(),
            cpu.rows(&ids).unwrap().to_vec::<f32>().unwrap(),
            "Weight::rows on {d}"
        );
    }
}

/// An f16 weight on f32 activations (`Weight::matmul_t`) gives the bits of the f16 tensor
/// product it stands for, `x.to_dtype(F16).matmul(w.t()).to_dtype(F32)`, at the decode (one
/// row), panel (16 and more rows) and general (2..16 rows) sizes, with a column count off the
/// 8-lane and panel boundaries, and a NaN and an infinity in the activations.
#[test]
fn f16_weight_product_equals_the_f16_tensor_product() {
    use wgtensor::models::Weight;
    use wgtensor::DType;
    for dev in devices() {
        for (m, k, n) in [(1, 37, 70), (5, 64, 129), (16, 37, 65), (33, 100, 130)] {
            let mut x = data(m * k, 11, 2.0);
            if m > 1 {
                x[k + 3] = f32::NAN;
                x[2 * k - 1] = f32::INFINITY;
            }
            let x = Tensor::from_vec(x, &[m, k], &dev).unwrap();
            let w = Tensor::from_vec(data(n * k, 12, 1.0), &[n, k], &dev)
                .unwrap()
                .to_dtype(DType::F16)
                .unwrap();
            let want = x
                .to_dtype(DType::F16)
                .unwrap()
                .matmul(&w.t().unwrap())
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            let got = Weight::Dense(w).matmul_t(&x).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let got = got.to_vec::<f32>().unwrap();
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(same, "{dev} m={m} k={k} n={n}: {got:?} != {want:?}");
        }
    }
}

const LOGITS_CHILD: &str = "WGTENSOR_MODELS_THREADS_CHILD";

/// The child of [`tiny_llama_logits_are_the_same_bits_at_any_thread_count`]: the tiny Llama's
/// logits (safetensors f32 and the Q8_0 and Q4_0 GGUF files) after a 60- or 100-token prefill
/// and after each of 4 decode steps, one `LOGITS file-length hash` line each. 60 positions
/// put the MLP's down projection (`[60, 96] · [64, 96]ᵀ`) past the size the CPU splits for
/// threads; cut by the thread count, 7 threads left a 4-column part that gemm sums in another
/// order.
#[test]
fn tiny_llama_logits_child() {
    use wgtensor::models::AutoModel;
    use wgtensor::DType;
    if std::env::var_os(LOGITS_CHILD).is_none() {
        return;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/llama");
    for (file, len) in [
        ("", 60),
        ("", 100),
        ("model-q8_0.gguf", 60),
        ("model-q4_0.gguf", 60),
    ] {
        let prompt: Vec<u32> = (0..len).map(|i| (i * 37 + 5) % 330).collect();
        let model = AutoModel::load(dir.join(file), &Device::cpu(), DType::F32).unwrap();
        let mut cache = model.new_cache(128).unwrap();
        let mut bits = Vec::new();
        let mut logits = model.forward_last(&prompt, &mut cache).unwrap();
        for step in 0..4u32 {
            bits.extend(logits.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()));
            logits = model.forward_last(&[step * 71 % 330], &mut cache).unwrap();
        }
        bits.extend(logits.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()));
        let hash = bits.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        println!("LOGITS {file}-{len} {hash:016x}");
    }
}

/// The tiny Llama's logits on the CPU are the same bits at 1, 2, 3, 7 and 12 rayon threads
/// (each a child process: rayon sizes its pool once per process).
#[test]
fn tiny_llama_logits_are_the_same_bits_at_any_thread_count() {
    if std::env::var_os(LOGITS_CHILD).is_some() {
        return;
    }
    let run = |threads: usize| {
        let text =
            crate::common::run_at_threads("decode::tiny_llama_logits_child", LOGITS_CHILD, threads);
        let lines: Vec<String> = text
            .lines()
            .filter_map(|l| Some(l[l.find("LOGITS ")?..].to_string()))
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        lines
    };
    let one = run(1);
    for threads in [2, 3, 7, 12] {
        assert_eq!(run(threads), one, "logits at {threads} threads vs 1");
    }
}
