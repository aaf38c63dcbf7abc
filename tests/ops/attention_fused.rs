//! The fused attention (one pass over keys and values per block of queries, online softmax,
//! backward recomputing the scores) against the composed reference (matmul, mask, softmax,
//! matmul) on the CPU and every adapter: values and the gradients of q, k, v and a float mask,
//! causal/boolean/float masks, L != S, head dims 1, 63, 64, 128, dropout (the same Philox
//! elements on both paths, replayed by checkpointing), NaN, and memory that grows linearly.

use crate::common;

use common::{assert_close, data, devices, gpus, values};
use wgtensor::nn::{Checkpoint, Module, MultiheadAttention};
use wgtensor::testing::force_attention;
use wgtensor::{DType, Device, Tensor};

/// Relative tolerance of fused against composed (the sums run in another order), relative to
/// each element or, for elements near 0, to the tensor's scale (at least 1: the inputs are O(1)).
const RTOL: f32 = 1e-5;

/// The global generator is shared by the test threads: tests that seed it and draw from it
/// (dropout, parameter init) take turns.
/// Tests that seed the generator and compare draws hold the binary's lock on it.
use common::rng_lock;

#[derive(Clone, Copy)]
enum MaskKind {
    None,
    /// Boolean `[L, S]`, the diagonal always allowed.
    Bool,
    /// Boolean key padding `[B, 1, 1, S]`.
    KeyPadding,
    /// Float `[B, 1, L, S]` (broadcast over heads), with its gradient checked.
    Float,
}

struct Case {
    batch: [usize; 2],
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    causal: bool,
    mask: MaskKind,
    dropout: f32,
}

/// Output and gradients `[dq, dk, dv, dmask]` of one run, forced to `mode`.
fn run(d: &Device, c: &Case, mode: &str, seed: u64) -> Vec<Vec<f32>> {
    let [b, h] = c.batch;
    let t = |shape: &[usize], s: u64, grad: bool| {
        let n = shape.iter().product();
        Tensor::from_vec(data(n, s, 1.5), shape, d)
            .unwrap()
            .requires_grad_(grad)
    };
    let q = t(&[b, h, c.l, c.e], seed, true);
    let k = t(&[b, h, c.s, c.e], seed + 1, true);
    let v = t(&[b, h, c.s, c.ev], seed + 2, true);
    let w = t(&[b, h, c.l, c.ev], seed + 3, false);
    let mask = match c.mask {
        MaskKind::None => None,
        MaskKind::Bool => {
            let m: Vec<u8> = data(c.l * c.s, seed + 4, 1.0)
                .iter()
                .enumerate()
                .map(|(x, r)| u8::from(*r > -0.3 || x / c.s == x % c.s))
                .collect();
            Some(Tensor::from_vec(m, &[c.l, c.s], d).unwrap())
        }
        MaskKind::KeyPadding => {
            let m: Vec<u8> = (0..b * c.s)
                .map(|x| u8::from(x % c.s < c.s - 1 - x / c.s))
                .collect();
            Some(Tensor::from_vec(m, &[b, 1, 1, c.s], d).unwrap())
        }
        MaskKind::Float => Some(t(&[b, 1, c.l, c.s], seed + 5, true)),
    };
    assert!(force_attention(Some(mode)));
    wgtensor::manual_seed(seed);
    let out =
        Tensor::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), c.causal, c.dropout, None)
            .unwrap();
    force_attention(None);
    out.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let mut r = vec![values(&out)];
    for x in [&q, &k, &v] {
        r.push(values(&x.grad().expect("a gradient")));
    }
    if let (MaskKind::Float, Some(m)) = (c.mask, &mask) {
        r.push(values(&m.grad().expect("the mask's gradient")));
    }
    r
}

/// The largest magnitude of `v` (the scale the absolute part of the tolerance uses).
fn scale_of(v: &[f32]) -> f32 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, x| m.max(x.abs()))
}

fn check(c: &Case, what: &str) {
    let _rng = rng_lock();
    for d in devices() {
        let fused = run(&d, c, "fused", 7);
        let composed = run(&d, c, "composed", 7);
        for (i, (f, r)) in fused.iter().zip(&composed).enumerate() {
            let name = ["out", "dq", "dk", "dv", "dmask"][i];
            let atol = RTOL * scale_of(r).max(1.0);
            assert_close(f, r, RTOL, atol, &format!("{what} {name} on {d}"));
        }
        assert_eq!(fused.len(), composed.len());
    }
}

fn case(l: usize, s: usize, e: usize) -> Case {
    Case {
        batch: [2, 3],
        l,
        s,
        e,
        ev: e,
        causal: false,
        mask: MaskKind::None,
        dropout: 0.0,
    }
}

#[test]
fn head_dims_match_the_composed_attention() {
    for e in [1, 63, 64, 128] {
        check(&case(37, 70, e), &format!("E = {e}"));
    }
}

#[test]
fn causal_attention_matches_with_l_equal_and_unequal_s() {
    for (l, s) in [(70, 70), (70, 45), (30, 100), (1, 1)] {
        let c = Case {
            causal: true,
            ..case(l, s, 16)
        };
        check(&c, &format!("causal L = {l}, S = {s}"));
    }
}

#[test]
fn masks_match_boolean_key_padding_and_float_with_its_gradient() {
    for (mask, causal) in [
        (MaskKind::Bool, false),
        (MaskKind::Bool, true),
        (MaskKind::KeyPadding, false),
        (MaskKind::Float, false),
        (MaskKind::Float, true),
    ] {
        let c = Case {
            mask,
            causal,
            ev: 24,
            ..case(66, 67, 20)
        };
        check(&c, "mask");
    }
}

#[test]
fn dropout_drops_the_same_elements_as_the_composed_path() {
    for causal in [false, true] {
        let c = Case {
            dropout: 0.25,
            causal,
            ..case(33, 65, 8)
        };
        check(&c, "dropout");
    }
}

#[test]
fn value_dim_differs_from_query_dim() {
    let c = Case {
        ev: 5,
        causal: true,
        ..case(20, 20, 9)
    };
    check(&c, "Ev != E");
}

#[test]
fn nan_propagates_as_in_the_composed_path() {
    for d in devices() {
        for (which, causal) in [(0usize, false), (0, true), (1, true), (2, false)] {
            let (l, s, e) = (9, 9, 4);
            let mut vals = [
                data(l * e, 1, 1.0),
                data(s * e, 2, 1.0),
                data(s * e, 3, 1.0),
            ];
            // Row 3 of q; key 0 (attended by every row); value 0.
            let at = if which == 0 { 3 * e + 1 } else { 1 };
            vals[which][at] = f32::NAN;
            let make =
                |v: &Vec<f32>, n: usize| Tensor::from_vec(v.clone(), &[1, n, e], &d).unwrap();
            let (q, k, v) = (make(&vals[0], l), make(&vals[1], s), make(&vals[2], s));
            let mut outs = Vec::new();
            for mode in ["fused", "composed"] {
                force_attention(Some(mode));
                let o = Tensor::scaled_dot_product_attention(&q, &k, &v, None, causal, 0.0, None);
                force_attention(None);
                outs.push(values(&o.unwrap()));
            }
            assert!(outs[1].iter().any(|x| x.is_nan()));
            assert_close(
                &outs[0],
                &outs[1],
                RTOL,
                RTOL,
                &format!("NaN in input {which} on {d}"),
            );
        }
    }
}

#[test]
fn multihead_attention_and_checkpointed_dropout_replay() {
    let _rng = rng_lock();
    for d in devices() {
        let grads = |checkpoint: bool, mode: &str| {
            wgtensor::manual_seed(3);
            let m = MultiheadAttention::new(16, 4, true, &d)
                .unwrap()
                .with_dropout(0.3);
            let x = Tensor::from_vec(data(2 * 12 * 16, 9, 1.0), &[2, 12, 16], &d)
                .unwrap()
                .requires_grad_(true);
            force_attention(Some(mode));
            let y = if checkpoint {
                Checkpoint::new(m.clone()).forward(&x)
            } else {
                m.forward(&x)
            }
            .unwrap();
            y.mul(&y).unwrap().sum_all().unwrap().backward().unwrap();
            force_attention(None);
            let mut r = vec![values(&y), values(&x.grad().unwrap())];
            r.extend(m.parameters().iter().map(|p| values(&p.grad().unwrap())));
            r
        };
        let plain = grads(false, "fused");
        let replayed = grads(true, "fused");
        let composed = grads(false, "composed");
        for (i, ((a, b), c)) in plain.iter().zip(&replayed).zip(&composed).enumerate() {
            // The checkpoint replays the same generator state: the same mask, the same bits.
            assert_eq!(a, b, "checkpointed tensor {i} on {d}");
            let atol = RTOL * scale_of(c).max(1.0);
            assert_close(a, c, RTOL, atol, &format!("MHA tensor {i} on {d}"));
        }
    }
}

#[test]
fn the_fused_path_is_deterministic() {
    let _rng = rng_lock();
    for d in devices() {
        let c = Case {
            causal: true,
            ..case(100, 100, 32)
        };
        assert_eq!(run(&d, &c, "fused", 5), run(&d, &c, "fused", 5), "on {d}");
    }
}

/// On the CPU a causal tile skips the exps past the causal end; an explicit causal mask takes
/// the full rows. Both give the same bits, forward and every gradient, NaN included (a NaN
/// key reaches the gradients of the rows that attend it): L past one 64-key tile and not a
/// multiple of 8 lanes, L != S both ways.
#[test]
fn causal_skip_has_the_bits_of_an_explicit_causal_mask_on_the_cpu() {
    let cpu = Device::cpu();
    for (l, s, e) in [(70usize, 70usize, 16usize), (9, 13, 4), (13, 9, 4)] {
        let mut kv = data(s * e, 22, 1.0);
        kv[5 * e] = f32::NAN;
        let grads = |causal: bool| {
            let leaf = |v: Vec<f32>, n: usize| {
                Tensor::from_vec(v, &[2, n, e], &cpu)
                    .unwrap()
                    .requires_grad_(true)
            };
            let q = leaf(data(2 * l * e, 21, 1.0), l);
            let k = leaf([kv.clone(), data(s * e, 23, 1.0)].concat(), s);
            let v = leaf(data(2 * s * e, 24, 1.0), s);
            // Row i attends keys 0..=i (top-left aligned, as `is_causal`).
            let keep: Vec<u8> = (0..l * s).map(|x| u8::from(x % s <= x / s)).collect();
            let mask = Tensor::from_vec(keep, &[l, s], &cpu).unwrap();
            force_attention(Some("fused"));
            let o = if causal {
                Tensor::scaled_dot_product_attention(&q, &k, &v, None, true, 0.0, None)
            } else {
                Tensor::scaled_dot_product_attention(&q, &k, &v, Some(&mask), false, 0.0, None)
            }
            .unwrap();
            let g = Tensor::from_vec(data(o.numel(), 25, 1.0), o.shape(), &cpu).unwrap();
            o.backward_with(&g).unwrap();
            force_attention(None);
            let bits = |t: &Tensor| -> Vec<u32> { values(t).iter().map(|x| x.to_bits()).collect() };
            vec![
                bits(&o),
                bits(&q.grad().unwrap()),
                bits(&k.grad().unwrap()),
                bits(&v.grad().unwrap()),
            ]
        };
        let (skip, masked) = (grads(true), grads(false));
        assert!(
            values_have_nan(&skip[0]),
            "{l}x{s}: the NaN key reaches the output"
        );
        for (i, (a, b)) in skip.iter().zip(&masked).enumerate() {
            assert_eq!(a, b, "{l}x{s}x{e}: tensor {i} (out, dq, dk, dv)");
        }
    }
}

fn values_have_nan(bits: &[u32]) -> bool {
    bits.iter().any(|b| f32::from_bits(*b).is_nan())
}

/// Peak memory of a causal forward + backward over `l` positions (64 dims, 1 head).
fn peak(d: &Device, l: usize) -> u64 {
    let q = Tensor::from_vec(data(l * 64, 1, 1.0), &[1, l, 64], d)
        .unwrap()
        .requires_grad_(true);
    d.synchronize().unwrap();
    wgtensor::reset_peak_memory_stats(d);
    let base = wgtensor::memory_allocated(d);
    // Software adapters default to the composed path below 256 MiB of scores.
    force_attention(Some("fused"));
    let y = Tensor::scaled_dot_product_attention(&q, &q, &q, None, true, 0.0, None);
    force_attention(None);
    let y = y.unwrap();
    y.sum_all().unwrap().backward().unwrap();
    let g = q.grad().unwrap();
    assert!(values(&g).iter().all(|x| x.is_finite()));
    wgtensor::max_memory_allocated(d) - base
}

fn linear_memory(d: &Device, l: usize) {
    let (small, big) = (peak(d, l / 4), peak(d, l));
    // A score matrix alone would be l² floats; the fused path stays near its O(l) operands
    // (q, the output, dO and three gradients: 6 l 64 floats, l² / 4 at 2,048 positions).
    let scores = (l * l * 4) as u64;
    assert!(
        big < scores / 4,
        "{l} positions on {d}: peak {big} B, scores {scores} B"
    );
    assert!(
        big <= 6 * small,
        "{d}: peak {small} B at {} and {big} B at {l}",
        l / 4
    );
}

// Peak memory is counted per device for the whole process: each measurement runs in a child
// of its own, so the other tests of this binary, running at the same time, do not enter it.
#[test]
fn memory_grows_linearly_on_the_cpu() {
    common::run_child(
        "attention_fused::memory_grows_linearly_on_the_cpu_child",
        &[],
    );
}

#[test]
fn memory_grows_linearly_on_the_cpu_child() {
    if !common::is_child("attention_fused::memory_grows_linearly_on_the_cpu_child") {
        return;
    }
    linear_memory(&Device::cpu(), 2048);
    common::child_done("attention_fused::memory_grows_linearly_on_the_cpu_child");
}

#[test]
fn memory_grows_linearly_on_gpus() {
    common::run_child("attention_fused::memory_grows_linearly_on_gpus_child", &[]);
}

#[test]
fn memory_grows_linearly_on_gpus_child() {
    if !common::is_child("attention_fused::memory_grows_linearly_on_gpus_child") {
        return;
    }
    for d in gpus() {
        linear_memory(&d, 2048);
    }
    common::child_done("attention_fused::memory_grows_linearly_on_gpus_child");
}

/// The brief's size: 16,384 positions x 64 dims x 1 head, forward and backward (its score
/// matrix would be 1 GiB). About 12 minutes in a debug build on 2 shared cores; see the
/// `sdpa_causal_16k` row of `benches/models.rs` for the CPU time and peak memory.
#[test]
#[ignore = "16,384 positions take minutes in a debug build; run with --ignored"]
fn sixteen_thousand_positions() {
    for d in devices() {
        linear_memory(&d, 16_384);
        // Its 1 GiB of scores makes the fused path the default on every device.
        let n = 16_384;
        let q = Tensor::from_vec(data(n * 64, 1, 1.0), &[1, n, 64], &d).unwrap();
        d.synchronize().unwrap();
        wgtensor::reset_peak_memory_stats(&d);
        let base = wgtensor::memory_allocated(&d);
        let y = Tensor::scaled_dot_product_attention(&q, &q, &q, None, true, 0.0, None).unwrap();
        assert!(values(&y).iter().all(|x| x.is_finite()));
        let peak = wgtensor::max_memory_allocated(&d) - base;
        assert!(
            peak < (n * n) as u64,
            "default path at {n} positions on {d}: {peak} B"
        );
    }
}

#[test]
fn other_dtypes_take_the_composed_path() {
    let d = Device::cpu();
    let q = Tensor::ones(&[2, 4], DType::F16, &d).unwrap();
    let out = Tensor::scaled_dot_product_attention(&q, &q, &q, None, true, 0.0, None).unwrap();
    assert_eq!(out.dtype(), DType::F16);
    assert_eq!(out.shape(), &[2, 4]);
}

/// The default path on a GPU: composed on software adapters (faster there) below 256 MiB of
/// scores, fused on hardware ones; the same bits as the forced path, on every call.
#[test]
fn the_default_path_follows_the_adapter() {
    for d in gpus() {
        let name = d.to_string();
        let software = wgtensor::adapters()
            .iter()
            .find(|a| a.names.contains(&name))
            .map(|a| a.is_software)
            .expect("the adapter of an open device");
        let q = Tensor::from_vec(data(2 * 24 * 8, 4, 1.0), &[2, 24, 8], &d).unwrap();
        let run = |mode: Option<&str>| {
            force_attention(mode);
            let y = Tensor::scaled_dot_product_attention(&q, &q, &q, None, true, 0.0, None);
            force_attention(None);
            values(&y.unwrap())
        };
        let expected = run(Some(if software { "composed" } else { "fused" }));
        let other = run(Some(if software { "fused" } else { "composed" }));
        for call in 0..2 {
            assert_eq!(run(None), expected, "call {call} on {d}");
        }
        // The two paths round differently, so the bits tell which one ran.
        assert_ne!(expected, other, "on {d}");
    }
}

/// Float64 attention on the host for the query rows `rows`: their outputs and `dq` rows, and
/// the `dk`, `dv` sums over those rows, of the loss `sum(out * w)`. Row-major `[n, dims]`
/// operands of one head.
struct Reference {
    out: Vec<Vec<f64>>,
    dq: Vec<Vec<f64>>,
    dk: Vec<f64>,
    dv: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn reference(
    [q, k, v, w]: [&[f32]; 4],
    s: usize,
    e: usize,
    causal: bool,
    scale: f64,
    rows: &[usize],
) -> Reference {
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum::<f64>()
    };
    let (mut out, mut dq) = (Vec::new(), Vec::new());
    let (mut dk, mut dv) = (vec![0.0; s * e], vec![0.0; s * e]);
    for &i in rows {
        let qi = &q[i * e..(i + 1) * e];
        let wi = &w[i * e..(i + 1) * e];
        let keys = if causal { (i + 1).min(s) } else { s };
        let sc: Vec<f64> = (0..keys)
            .map(|j| scale * dot(qi, &k[j * e..(j + 1) * e]))
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let ex: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let sum: f64 = ex.iter().sum();
        let p: Vec<f64> = ex.iter().map(|x| x / sum).collect();
        let mut o = vec![0.0; e];
        for (j, &pj) in p.iter().enumerate() {
            for d in 0..e {
                o[d] += pj * v[j * e + d] as f64;
            }
        }
        let dp: Vec<f64> = (0..keys).map(|j| dot(wi, &v[j * e..(j + 1) * e])).collect();
        let big_d: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
        let mut g = vec![0.0; e];
        for j in 0..keys {
            let ds = p[j] * (dp[j] - big_d);
            for d in 0..e {
                g[d] += scale * ds * k[j * e + d] as f64;
                dk[j * e + d] += scale * ds * qi[d] as f64;
                dv[j * e + d] += p[j] * wi[d] as f64;
            }
        }
        out.push(o);
        dq.push(g);
    }
    Reference { out, dq, dk, dv }
}

/// `got` against a float64 reference: within `tol` times the reference's largest magnitude (f32
/// sums over 16,384 terms of O(1) values).
fn assert_near(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1e-3f64, |a, &x| a.max(x.abs()));
    for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a as f64 - b).abs() <= tol * scale,
            "{what}: first mismatch at {i}: got {a}, float64 reference {b} (tolerance {})",
            tol * scale
        );
    }
}

/// One head of `l` queries and `s` keys (64 dims) through the fused kernels, forward and
/// backward of `sum(out * w)`: `[out, dq, dk, dv]` and the host operands `[q, k, v, w]`.
fn fused_run(d: &Device, l: usize, s: usize, causal: bool) -> ([Vec<f32>; 4], [Vec<f32>; 4]) {
    let e = 64;
    // The inputs: q and k scaled by 0.5.
    let host = [
        data(l * e, 11, 0.5),
        data(s * e, 12, 0.5),
        data(s * e, 13, 1.0),
        data(l * e, 14, 1.0),
    ];
    let t = |h: &Vec<f32>, n: usize, grad: bool| {
        Tensor::from_vec(h.clone(), &[1, 1, n, e], d)
            .unwrap()
            .requires_grad_(grad)
    };
    let (q, k, v, w) = (
        t(&host[0], l, true),
        t(&host[1], s, true),
        t(&host[2], s, true),
        t(&host[3], l, false),
    );
    force_attention(Some("fused"));
    let out = Tensor::scaled_dot_product_attention(&q, &k, &v, None, causal, 0.0, None);
    force_attention(None);
    let out = out.unwrap();
    out.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let got = [
        values(&out),
        values(&q.grad().unwrap()),
        values(&k.grad().unwrap()),
        values(&v.grad().unwrap()),
    ];
    (got, host)
}

/// Every streamed loop of the fused kernels at 16,384 rows, against float64 on the host: the
/// forward and attn_dq stream 16,384 keys (64 queries), attn_dkv 16,384 queries (64 keys,
/// causal). One pass over them ran 1,024 steps of loops, far past the 65,535 loop iterations
/// after which lavapipe silently stops an invocation's loops (the output was wrong from
/// ~900 keys on): the kernels now stream them in passes, one dispatch each.
#[test]
fn sixteen_thousand_keys_or_queries_match_float64() {
    for d in devices() {
        for (l, s, causal) in [(64, 16_384, false), (16_384, 64, true)] {
            let (got, host) = fused_run(&d, l, s, causal);
            let rows: Vec<usize> = (0..l).collect();
            let r = reference(
                [&host[0], &host[1], &host[2], &host[3]],
                s,
                64,
                causal,
                0.125,
                &rows,
            );
            let what = |x: &str| format!("{d}: {x} of {l} queries by {s} keys (causal {causal})");
            assert_near(&got[0], &r.out.concat(), 1e-4, &what("output"));
            assert_near(&got[1], &r.dq.concat(), 1e-4, &what("dq"));
            assert_near(&got[2], &r.dk, 1e-4, &what("dk"));
            assert_near(&got[3], &r.dv, 1e-4, &what("dv"));
        }
    }
}

/// The case: causal attention over 16,384 positions (`[1, 1, 16384, 64]`, q and k
/// scaled by 0.5) on each adapter, the default path (fused: its scores would be 1 GiB), the
/// output against float64 on the host at sampled rows (the first, 777, the middle, the last
/// ones), where one pass gave -0.0353 for 0.0125 at row 16383. The backward's long loops are
/// covered by `sixteen_thousand_keys_or_queries_match_float64`. On the software adapter the
/// forward alone takes over two minutes (past the default wait), hence `--ignored`.
#[test]
#[ignore = "over two minutes on a software adapter; run with --ignored"]
fn causal_sixteen_thousand_positions_match_float64_on_gpus() {
    let (n, e) = (16_384, 64);
    let host = [
        data(n * e, 11, 0.5),
        data(n * e, 12, 0.5),
        data(n * e, 13, 1.0),
        data(n * e, 14, 1.0),
    ];
    let rows: Vec<usize> = [0, 777, 8191, 12_000].into_iter().chain(n - 4..n).collect();
    let r = reference(
        [&host[0], &host[1], &host[2], &host[3]],
        n,
        e,
        true,
        0.125,
        &rows,
    );
    for d in gpus() {
        d.set_timeout(std::time::Duration::from_secs(1200));
        let t = |h: &Vec<f32>| Tensor::from_vec(h.clone(), &[1, 1, n, e], &d).unwrap();
        let out = Tensor::scaled_dot_product_attention(
            &t(&host[0]),
            &t(&host[1]),
            &t(&host[2]),
            None,
            true,
            0.0,
            None,
        )
        .unwrap();
        let got = values(&out);
        for (at, &i) in rows.iter().enumerate() {
            let what = format!("{d}: output row {i} of {n} causal positions");
            assert_near(&got[i * e..(i + 1) * e], &r.out[at], 1e-4, &what);
        }
    }
}

/// Decode attention over a cache of 16,384 positions (and a length that ends inside a tile),
/// against float64 on the host, on the CPU and every adapter: with a head of 256 dims, one
/// pass over the cache ran its loops past the 65,535 iterations after which lavapipe silently
/// stops an invocation's loops (wrong from ~11,000 positions on); it now takes the cache in
/// passes.
#[test]
fn decode_over_sixteen_thousand_positions_matches_float64() {
    for hd in [64, 256] {
        decode_matches_float64(hd);
    }
}

fn decode_matches_float64(hd: usize) {
    let (heads, kv_heads, cap) = (4, 2, 16_384);
    let q = data(heads * hd, 21, 0.5);
    let k = data(cap * kv_heads * hd, 22, 0.5);
    let v = data(cap * kv_heads * hd, 23, 1.0);
    let scale = 1.0 / (hd as f32).sqrt();
    for d in devices() {
        let t = |h: &Vec<f32>, shape: &[usize]| Tensor::from_vec(h.clone(), shape, &d).unwrap();
        let (qt, kt, vt) = (
            t(&q, &[heads, hd]),
            t(&k, &[cap, kv_heads, hd]),
            t(&v, &[cap, kv_heads, hd]),
        );
        for len in [cap, 16_000] {
            let got = values(&Tensor::attention_decode(&qt, &kt, &vt, len, scale).unwrap());
            let mut want = Vec::new();
            for h in 0..heads {
                let kvh = h / (heads / kv_heads);
                let at = |p: usize| (p * kv_heads + kvh) * hd;
                let qh = &q[h * hd..(h + 1) * hd];
                let sc: Vec<f64> = (0..len)
                    .map(|p| {
                        let kp = &k[at(p)..at(p) + hd];
                        scale as f64
                            * qh.iter()
                                .zip(kp)
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum::<f64>()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let ex: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = ex.iter().sum();
                want.extend(
                    (0..hd).map(|dd| {
                        (0..len).map(|p| ex[p] * v[at(p) + dd] as f64).sum::<f64>() / sum
                    }),
                );
            }
            assert_near(
                &got,
                &want,
                1e-4,
                &format!("{d}: decode over {len} positions, head dim {hd}"),
            );
        }
    }
}

/// Output and `[dq, dk, dv]` of an attention of 2 heads in which head 0's query 1 may attend
/// to no key (a U8 or a float mask, with and without `is_causal`), forced to `mode`.
fn fully_masked_run(d: &Device, float: bool, causal: bool, mode: &str) -> Vec<Vec<f32>> {
    let (h, l, s, e) = (2, 4, 5, 8);
    let t = |shape: &[usize], seed: u64, grad: bool| {
        let n = shape.iter().product();
        Tensor::from_vec(data(n, seed, 1.0), shape, d)
            .unwrap()
            .requires_grad_(grad)
    };
    let (q, k, v) = (
        t(&[1, h, l, e], 1, true),
        t(&[1, h, s, e], 2, true),
        t(&[1, h, s, e], 3, true),
    );
    let w = t(&[1, h, l, e], 4, false);
    // Head 0, row 1: nothing; every other row keeps its diagonal and the last key.
    let keep: Vec<bool> = (0..h * l * s)
        .map(|x| {
            let (hh, r, c) = (x / (l * s), x / s % l, x % s);
            !(hh == 0 && r == 1) && (c == r || c == s - 1 || (c + r) % 3 == 0)
        })
        .collect();
    let mask = if float {
        let m = keep
            .iter()
            .map(|&k| if k { 0.0 } else { f32::NEG_INFINITY })
            .collect();
        Tensor::from_vec(m, &[h, l, s], d).unwrap()
    } else {
        Tensor::from_vec(keep.iter().map(|&k| u8::from(k)).collect(), &[h, l, s], d).unwrap()
    };
    assert!(force_attention(Some(mode)));
    let out = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(&mask), causal, 0.0, None);
    force_attention(None);
    let out = out.unwrap();
    out.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let mut r = vec![values(&out)];
    for x in [&q, &k, &v] {
        r.push(values(&x.grad().expect("a gradient")));
    }
    r
}

/// a query that may attend to no key gives PyTorch's math-path answer on every path and
/// device, whatever the mask's dtype: its output row is NaN, and so are its q-gradient row
/// and the whole k- and v-gradients of its head (the NaN of `softmax` of all `-inf` flows back
/// through the scores, as it does through PyTorch's additive mask); every other head's values
/// agree with the CPU's composed float-mask run.
#[test]
fn a_fully_masked_row_has_the_same_nan_gradients_on_every_path() {
    let (l, s, e) = (4, 5, 8);
    let names = ["out", "dq", "dk", "dv"];
    // Whether element `i` of result `which` is NaN in PyTorch's answer.
    let nan = |which: usize, i: usize| match which {
        0 | 1 => i / (l * e) == 0 && i / e % l == 1,
        _ => i / (s * e) == 0,
    };
    for d in devices() {
        for (float, causal, mode) in [false, true]
            .into_iter()
            .flat_map(|f| [false, true].map(|c| (f, c)))
            .flat_map(|(f, c)| ["fused", "composed"].map(|m| (f, c, m)))
        {
            let ctx = format!(
                "{d}, {} mask, causal {causal}, {mode}",
                if float { "float" } else { "U8" }
            );
            let got = fully_masked_run(&d, float, causal, mode);
            let want = fully_masked_run(&Device::cpu(), true, causal, "composed");
            for (which, (g, w)) in got.iter().zip(&want).enumerate() {
                for (i, x) in g.iter().enumerate() {
                    assert_eq!(
                        x.is_nan(),
                        nan(which, i),
                        "{ctx}: {}[{i}] = {x}",
                        names[which]
                    );
                    if !x.is_nan() {
                        assert!(
                            (x - w[i]).abs() <= 1e-4 * (1.0 + w[i].abs()),
                            "{ctx}: {}[{i}] = {x}, want {}",
                            names[which],
                            w[i]
                        );
                    }
                }
            }
        }
    }
}
