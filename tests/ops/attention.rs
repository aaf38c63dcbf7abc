//! Attention and the ops around it, on every device, against host loops written here.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::nn::{Module, MultiheadAttention, TransformerBlock};
use wgtensor::{DType, Device, Tensor};

/// `softmax(q kᵀ * scale + mask) v` for one head: q `[l, e]`, k `[s, e]`, v `[s, ev]`;
/// `allowed(i, j)` false masks a score.
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (l, s, e, ev): (usize, usize, usize, usize),
    allowed: impl Fn(usize, usize) -> bool,
) -> Vec<f32> {
    let scale = 1.0 / (e as f64).sqrt();
    let mut out = vec![0f32; l * ev];
    for i in 0..l {
        let scores: Vec<f64> = (0..s)
            .map(|j| {
                if !allowed(i, j) {
                    return f64::NEG_INFINITY;
                }
                (0..e)
                    .map(|t| q[i * e + t] as f64 * k[j * e + t] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let ex: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = ex.iter().sum();
        for c in 0..ev {
            out[i * ev + c] = (0..s)
                .map(|j| ex[j] / z * v[j * ev + c] as f64)
                .sum::<f64>() as f32;
        }
    }
    out
}

#[test]
fn sdpa_matches_reference_with_and_without_masks() {
    let (b, l, s, e, ev) = (3, 5, 7, 4, 6);
    let q = data(b * l * e, 1, 1.0);
    let k = data(b * s * e, 2, 1.0);
    let v = data(b * s * ev, 3, 1.0);
    let mask: Vec<u8> = (0..l * s).map(|i| u8::from(i % 3 != 1)).collect();
    let per = |f: &dyn Fn(usize, usize) -> bool| -> Vec<f32> {
        (0..b)
            .flat_map(|h| {
                attention_ref(
                    &q[h * l * e..(h + 1) * l * e],
                    &k[h * s * e..(h + 1) * s * e],
                    &v[h * s * ev..(h + 1) * s * ev],
                    (l, s, e, ev),
                    f,
                )
            })
            .collect()
    };
    let plain = per(&|_, _| true);
    let causal = per(&|i, j| j <= i);
    let masked = per(&|i, j| mask[i * s + j] == 1);
    for dev in devices() {
        let qt = Tensor::from_vec(q.clone(), &[b, l, e], &dev).unwrap();
        let kt = Tensor::from_vec(k.clone(), &[b, s, e], &dev).unwrap();
        let vt = Tensor::from_vec(v.clone(), &[b, s, ev], &dev).unwrap();
        let mt = Tensor::from_vec(mask.clone(), &[l, s], &dev).unwrap();
        let sdpa = |m: Option<&Tensor>, c: bool| {
            values(&Tensor::scaled_dot_product_attention(&qt, &kt, &vt, m, c, 0.0, None).unwrap())
        };
        assert_close(
            &sdpa(None, false),
            &plain,
            1e-4,
            1e-5,
            &format!("sdpa on {dev}"),
        );
        assert_close(
            &sdpa(None, true),
            &causal,
            1e-4,
            1e-5,
            &format!("causal on {dev}"),
        );
        assert_close(
            &sdpa(Some(&mt), false),
            &masked,
            1e-4,
            1e-5,
            &format!("mask on {dev}"),
        );
        // A float mask of 0 / -inf is the same as the boolean mask.
        let fm = mt.eq_scalar(0.0).unwrap().where_cond(
            &Tensor::full(&[1], f64::NEG_INFINITY, DType::F32, &dev).unwrap(),
            &Tensor::zeros(&[1], DType::F32, &dev).unwrap(),
        );
        assert_close(
            &sdpa(Some(&fm.unwrap()), false),
            &masked,
            1e-4,
            1e-5,
            &format!("float mask on {dev}"),
        );
        // Dropout only while asked; p outside [0, 1) is an error.
        assert!(
            Tensor::scaled_dot_product_attention(&qt, &kt, &vt, None, false, 1.0, None).is_err()
        );
        let d =
            Tensor::scaled_dot_product_attention(&qt, &kt, &vt, None, false, 0.5, None).unwrap();
        assert_eq!(d.shape(), &[b, l, ev]);
        // Mismatched head dims are a shape error.
        let bad = Tensor::zeros(&[b, s, e + 1], DType::F32, &dev).unwrap();
        assert!(
            Tensor::scaled_dot_product_attention(&qt, &bad, &vt, None, false, 0.0, None).is_err()
        );
    }
}

#[test]
fn causal_attention_ignores_the_future() {
    // Draws from the global generator (the block's weights): other tests compare seeded draws.
    let _rng = common::rng_lock();
    for dev in devices() {
        wgtensor::manual_seed(3);
        let mut block = TransformerBlock::new(8, 2, 16, true, 0.0, &Device::cpu()).unwrap();
        block.to(&dev).unwrap();
        let x = data(2 * 6 * 8, 4, 1.0);
        let mut y = x.clone();
        // Change only the last position of each sequence.
        for b in 0..2 {
            for c in 0..8 {
                y[(b * 6 + 5) * 8 + c] += 3.0;
            }
        }
        let a = values(
            &block
                .forward(&Tensor::from_vec(x, &[2, 6, 8], &dev).unwrap())
                .unwrap(),
        );
        let bb = values(
            &block
                .forward(&Tensor::from_vec(y, &[2, 6, 8], &dev).unwrap())
                .unwrap(),
        );
        for b in 0..2 {
            let first = (b * 6) * 8..(b * 6 + 5) * 8;
            assert_close(
                &bb[first.clone()],
                &a[first],
                1e-5,
                1e-5,
                &format!("past on {dev}"),
            );
            assert!(
                (bb[(b * 6 + 5) * 8] - a[(b * 6 + 5) * 8]).abs() > 1e-4,
                "last changes on {dev}"
            );
        }
        // Multi-head self-attention equals attend(x, x, x).
        let mha = MultiheadAttention::new(8, 4, false, &dev).unwrap();
        let xt = Tensor::from_vec(data(24, 5, 1.0), &[1, 3, 8], &dev).unwrap();
        let x2 = Tensor::from_vec(data(24, 5, 1.0), &[1, 3, 8], &dev).unwrap();
        assert_close(
            &values(&mha.forward(&xt).unwrap()),
            &values(&mha.attend(&xt, &x2, &x2, None, false).unwrap()),
            1e-5,
            1e-5,
            &format!("mha self vs cross on {dev}"),
        );
    }
}

#[test]
fn masks_reductions_and_scans_match_host_loops() {
    let (r, c) = (4usize, 5usize);
    let x = data(2 * r * c, 6, 2.0);
    for dev in devices() {
        let t = Tensor::from_vec(x.clone(), &[2, r, c], &dev).unwrap();
        for diag in [-1isize, 0, 2] {
            let lo = values(&t.tril(diag).unwrap());
            let up = values(&t.triu(diag).unwrap());
            for (i, (&a, &b)) in lo.iter().zip(&up).enumerate() {
                let (row, col) = ((i / c) % r, i % c);
                let d = col as isize - row as isize;
                assert_eq!(
                    a,
                    if d <= diag { x[i] } else { 0.0 },
                    "tril({diag}) on {dev}"
                );
                assert_eq!(
                    b,
                    if d >= diag { x[i] } else { 0.0 },
                    "triu({diag}) on {dev}"
                );
            }
        }
        // logsumexp over the last dim, including a row of -inf and one of huge values.
        let mut y = x.clone();
        for v in &mut y[0..c] {
            *v = f32::NEG_INFINITY;
        }
        for v in &mut y[c..2 * c] {
            *v += 500.0;
        }
        let lse = values(
            &Tensor::from_vec(y.clone(), &[2, r, c], &dev)
                .unwrap()
                .logsumexp(-1, false)
                .unwrap(),
        );
        let want: Vec<f32> = y
            .chunks(c)
            .map(|row| {
                let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
                if m == f64::NEG_INFINITY {
                    return f32::NEG_INFINITY;
                }
                (m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()) as f32
            })
            .collect();
        assert_close(&lse, &want, 1e-5, 1e-5, &format!("logsumexp on {dev}"));
        // var / std over dim 1 (unbiased and population).
        for corr in [0usize, 1] {
            let v = values(&t.var(1, corr, false).unwrap());
            let mut want = vec![];
            for b in 0..2 {
                for col in 0..c {
                    let xs: Vec<f64> = (0..r).map(|i| x[(b * r + i) * c + col] as f64).collect();
                    let m = xs.iter().sum::<f64>() / r as f64;
                    want.push(
                        (xs.iter().map(|z| (z - m).powi(2)).sum::<f64>() / (r - corr) as f64)
                            as f32,
                    );
                }
            }
            assert_close(&v, &want, 1e-4, 1e-5, &format!("var corr {corr} on {dev}"));
            let sd: Vec<f32> = want.iter().map(|w| w.sqrt()).collect();
            assert_close(
                &values(&t.std(1, corr, false).unwrap()),
                &sd,
                1e-4,
                1e-5,
                &format!("std on {dev}"),
            );
        }
        // sum over dims (0, 2) and cumsum along dim 1.
        let s = values(&t.sum_dims(&[0, -1], false).unwrap());
        let want: Vec<f32> = (0..r)
            .map(|i| {
                (0..2)
                    .flat_map(|b| (0..c).map(move |j| (b, j)))
                    .map(|(b, j)| x[(b * r + i) * c + j])
                    .sum()
            })
            .collect();
        assert_close(&s, &want, 1e-5, 1e-5, &format!("sum_dims on {dev}"));
        assert!(t.sum_dims(&[1, 1], false).is_err());
        let cs = values(&t.cumsum(1).unwrap());
        let mut want = x.clone();
        for b in 0..2 {
            for i in 1..r {
                for j in 0..c {
                    want[(b * r + i) * c + j] += want[(b * r + i - 1) * c + j];
                }
            }
        }
        assert_close(&cs, &want, 1e-5, 1e-5, &format!("cumsum on {dev}"));
        // masked_fill and slice_assign.
        let m = Tensor::from_vec(
            (0..c).map(|j| u8::from(j % 2 == 0)).collect::<Vec<u8>>(),
            &[c],
            &dev,
        )
        .unwrap();
        let f = values(&t.masked_fill(&m, 7.0).unwrap());
        for (i, &v) in f.iter().enumerate() {
            assert_eq!(
                v,
                if (i % c) % 2 == 0 { 7.0 } else { x[i] },
                "masked_fill on {dev}"
            );
        }
        let src = Tensor::full(&[2, 2, c], 9.0, DType::F32, &dev).unwrap();
        let a = values(&t.slice_assign(1, 1, &src).unwrap());
        for (i, &v) in a.iter().enumerate() {
            let row = (i / c) % r;
            assert_eq!(
                v,
                if (1..3).contains(&row) { 9.0 } else { x[i] },
                "slice_assign on {dev}"
            );
        }
        assert!(t.slice_assign(1, 3, &src).is_err(), "past the end");
    }
}

#[test]
fn topk_and_rms_norm_match_host_loops() {
    let x = data(3 * 9, 7, 1.0);
    for dev in devices() {
        let t = Tensor::from_vec(x.clone(), &[3, 9], &dev).unwrap();
        for largest in [true, false] {
            let (v, i) = t.topk(4, 1, largest).unwrap();
            let (v, i) = (values(&v), i.to_vec::<u32>().unwrap());
            for row in 0..3 {
                let mut idx: Vec<usize> = (0..9).collect();
                idx.sort_by(|&a, &b| {
                    let (p, q) = (x[row * 9 + a], x[row * 9 + b]);
                    if largest {
                        q.total_cmp(&p)
                    } else {
                        p.total_cmp(&q)
                    }
                });
                for k in 0..4 {
                    assert_eq!(i[row * 4 + k] as usize, idx[k], "topk index on {dev}");
                    assert_eq!(v[row * 4 + k], x[row * 9 + idx[k]], "topk value on {dev}");
                }
            }
        }
        assert!(t.topk(10, 1, true).is_err());
        let w = Tensor::from_vec(data(9, 8, 1.0), &[9], &dev).unwrap();
        let y = values(&t.rms_norm(Some(&w), 1e-6).unwrap());
        let wv = data(9, 8, 1.0);
        for row in 0..3 {
            let ms = x[row * 9..(row + 1) * 9]
                .iter()
                .map(|v| (*v as f64).powi(2))
                .sum::<f64>()
                / 9.0;
            for j in 0..9 {
                let want = (x[row * 9 + j] as f64 / (ms + 1e-6).sqrt() * wv[j] as f64) as f32;
                assert!((y[row * 9 + j] - want).abs() < 1e-5, "rms_norm on {dev}");
            }
        }
    }
}
