//! The correctness part of `examples/device_report.rs`, also run by
//! `tests/runtime/device_report.rs`: every op family on small shapes (edge sizes: workgroup + 1,
//! tile-unaligned) against a host reference computed in f64, with an explicit tolerance per
//! family. The op tables (`wgtensor::testing::*_ops()`, `Tensor::matmul_kernels()`,
//! `QType::ALL`) give the cases, so a new op or kernel is checked without editing this file.
#![allow(dead_code)]

use wgtensor::{Conv2dOptions, DType, Device, QTensor, QType, Result, Tensor};

/// One line of the report: `Ok(detail)` or `Err(first mismatch or error)`.
pub struct Check {
    pub name: String,
    pub outcome: std::result::Result<String, String>,
}

impl Check {
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }

    pub fn line(&self) -> String {
        match &self.outcome {
            Ok(d) => format!("ok{d}"),
            Err(e) => format!("MISMATCH {e}"),
        }
    }
}

/// `got` against `want` within `atol + rtol * |want|`; NaN matches NaN, infinities match
/// themselves. `Ok` carries the largest error seen.
pub fn compare(
    got: &[f32],
    want: &[f64],
    atol: f64,
    rtol: f64,
) -> std::result::Result<String, String> {
    if got.len() != want.len() {
        return Err(format!("{} values, want {}", got.len(), want.len()));
    }
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g as f64;
        if w.is_nan() || g.is_nan() || w.is_infinite() || g.is_infinite() {
            let same = (w.is_nan() && g.is_nan()) || g == w;
            // f32 overflow of a finite f64 reference is the same answer.
            let overflow = g.is_infinite() && (w as f32).is_infinite() && g.signum() == w.signum();
            if !(same || overflow) {
                return Err(format!("at {i}: got {g}, want {w}"));
            }
            continue;
        }
        let err = (g - w).abs();
        if err > atol + rtol * w.abs() {
            return Err(format!(
                "at {i}: got {g}, want {w} (|err| {err:.3e} > {atol:e} + {rtol:e}·|want|)"
            ));
        }
        worst = worst.max(err);
    }
    Ok(format!(" (max |err| {worst:.1e})"))
}

fn check(name: impl Into<String>, r: Result<std::result::Result<String, String>>) -> Check {
    Check {
        name: name.into(),
        outcome: r.unwrap_or_else(|e| Err(format!("error: {e}"))),
    }
}

fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

/// Deterministic values in `[lo, hi)`, distinct for distinct `i`.
fn values(n: usize, lo: f32, hi: f32, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2654435761).rotate_left(13) ^ seed;
            let u = (h.wrapping_mul(0x9E3779B1) >> 8) as f32 / (1u32 << 24) as f32;
            lo + (hi - lo) * (u * 0.999 + 0.001 * (i as f32 / n as f32))
        })
        .collect()
}

/// 257 elements: one past a 256-wide workgroup.
const N: usize = 257;

fn elementwise(dev: &Device, out: &mut Vec<Check>) {
    let xs = values(N, -3.0, 3.0, 1);
    let ys = values(N, -2.5, 2.5, 2);
    let tensors = (|| -> Result<(Tensor, Tensor)> {
        Ok((
            Tensor::from_vec(xs.clone(), &[N], dev)?,
            Tensor::from_vec(ys.clone(), &[N], dev)?,
        ))
    })();
    let (x, y) = match tensors {
        Ok(t) => t,
        Err(e) => {
            out.push(check("elementwise", Err(e)));
            return;
        }
    };
    // GPU transcendental functions are accurate to a few ULP of their result (Vulkan's
    // precision rules; sin/cos absolutely to 2^-11 near the origin), hence 1e-3.
    for op in wgtensor::testing::unary_ops() {
        let want: Vec<f64> = xs.iter().map(|&v| op.reference(v) as f64).collect();
        out.push(check(
            format!("unary {}", op.name()),
            op.call(&x)
                .and_then(|t| f32s(&t))
                .map(|g| compare(&g, &want, 1e-3, 1e-3)),
        ));
    }
    for op in wgtensor::testing::binary_ops() {
        let want: Vec<f64> = xs
            .iter()
            .zip(&ys)
            .map(|(&a, &b)| op.reference(a, b) as f64)
            .collect();
        out.push(check(
            format!("binary {}", op.name()),
            op.call(&x, &y)
                .and_then(|t| f32s(&t))
                .map(|g| compare(&g, &want, 1e-3, 1e-3)),
        ));
    }
    // Comparisons over equal, smaller and larger pairs.
    let zs: Vec<f32> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % 3 == 0 { v } else { -v })
        .collect();
    let z = Tensor::from_vec(zs.clone(), &[N], dev);
    for op in wgtensor::testing::compare_ops() {
        let want: Vec<f64> = xs
            .iter()
            .zip(&zs)
            .map(|(&a, &b)| op.reference(a, b) as u8 as f64)
            .collect();
        let r = z
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|z| op.call(&x, z))
            .and_then(|t| f32s(&t))
            .map(|g| compare(&g, &want, 0.0, 0.0));
        out.push(check(format!("compare {}", op.name()), r));
    }
}

fn reduce_reference(name: &str, row: &[f32]) -> f64 {
    let v = row.iter().map(|&x| x as f64);
    let first_of = |better: fn(f64, f64) -> bool| {
        let mut best = 0;
        for (i, &x) in row.iter().enumerate() {
            if better(x as f64, row[best] as f64) {
                best = i;
            }
        }
        best as f64
    };
    match name {
        "sum" | "nansum" => v.filter(|x| !x.is_nan()).sum(),
        "mean" => v.sum::<f64>() / row.len() as f64,
        "prod" => v.product(),
        "max" => v.fold(f64::NEG_INFINITY, f64::max),
        "min" => v.fold(f64::INFINITY, f64::min),
        "argmax" => first_of(|a, b| a > b),
        "argmin" => first_of(|a, b| a < b),
        "count_nonzero" => v.filter(|&x| x != 0.0).count() as f64,
        _ => f64::NAN,
    }
}

fn reductions(dev: &Device, out: &mut Vec<Check>) {
    let rows = 7;
    for op in wgtensor::testing::reduce_ops() {
        let name = op.name();
        // Products of values near 1 stay finite; the others see zeros too.
        let vals: Vec<f32> = if name == "prod" {
            values(rows * N, 0.95, 1.05, 5)
        } else {
            values(rows * N, -1.5, 1.5, 6)
                .into_iter()
                .enumerate()
                .map(|(i, v)| if i % 17 == 0 { 0.0 } else { v })
                .collect()
        };
        let want: Vec<f64> = vals.chunks(N).map(|r| reduce_reference(name, r)).collect();
        if want.iter().all(|w| w.is_nan()) {
            out.push(check(
                format!("reduce {name}"),
                Ok(Err(format!("the report has no host reference for {name}"))),
            ));
            continue;
        }
        let all = reduce_reference(name, &vals);
        let (atol, rtol) = if op.is_arg() {
            (0.0, 0.0)
        } else {
            (1e-4, 1e-4)
        };
        let r = (|| -> Result<std::result::Result<String, String>> {
            let t = Tensor::from_vec(vals.clone(), &[rows, N], dev)?;
            let dim = f32s(&op.call(&t, 1, false)?)?;
            let whole = f32s(&op.call_all(&t)?)?;
            Ok(compare(&dim, &want, atol, rtol).and_then(|a| {
                // An arg-reduction over the flattened tensor names a flat index.
                compare(&whole, &[all], atol, rtol).map(|_| a)
            }))
        })();
        out.push(check(format!("reduce {name}"), r));
    }
}

fn rows(dev: &Device, out: &mut Vec<Check>) {
    let x = values(5 * N, -4.0, 4.0, 7);
    for op in wgtensor::testing::row_ops() {
        let r = (|| -> Result<std::result::Result<String, String>> {
            let host = Tensor::from_vec(x.clone(), &[5, N], &Device::cpu())?;
            let want: Vec<f64> = f32s(&op.composed(&host)?)?
                .iter()
                .map(|&v| v as f64)
                .collect();
            let got = f32s(&op.call(&host.to(dev)?)?)?;
            let tol = op.tolerance() as f64;
            Ok(compare(&got, &want, tol, tol))
        })();
        out.push(check(format!("rows {}", op.name()), r));
    }
}

fn host_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j] as f64;
            }
        }
    }
    c
}

fn matmul(dev: &Device, out: &mut Vec<Check>) {
    // Tile-unaligned, aligned, and the two vector shapes of decode.
    let shapes = [(67, 131, 65), (64, 128, 64), (1, 300, 129), (129, 300, 1)];
    let kernels: Vec<&str> = if dev.is_cpu() {
        vec!["default"]
    } else {
        std::iter::once("default")
            .chain(Tensor::matmul_kernels())
            .collect()
    };
    for dtype in [DType::F32, DType::F16] {
        // The vec4 kernels are f32 kernels.
        for &kernel in kernels
            .iter()
            .filter(|k| dtype == DType::F32 || !k.contains("vec4"))
        {
            let r = (|| -> Result<std::result::Result<String, String>> {
                let mut detail = String::new();
                // The vec4 kernels take aligned operands only (others are refused by name).
                let aligned =
                    |&&(m, k, n): &&(usize, usize, usize)| m % 4 == 0 && k % 4 == 0 && n % 4 == 0;
                for &(m, k, n) in shapes
                    .iter()
                    .filter(|s| !kernel.contains("vec4") || aligned(s))
                {
                    let round = |v: Vec<f32>| -> Vec<f32> {
                        if dtype == DType::F16 {
                            v.into_iter()
                                .map(|x| wgtensor::f16::from_f32(x).to_f32())
                                .collect()
                        } else {
                            v
                        }
                    };
                    let av = round(values(m * k, -1.0, 1.0, 8));
                    let bv = round(values(k * n, -1.0, 1.0, 9));
                    let a = Tensor::from_vec(av.clone(), &[m, k], dev)?.to_dtype(dtype)?;
                    let b = Tensor::from_vec(bv.clone(), &[k, n], dev)?.to_dtype(dtype)?;
                    let c = if kernel == "default" {
                        a.matmul(&b)?
                    } else {
                        a.matmul_with_kernel(&b, kernel)?
                    };
                    let want = host_matmul(&av, &bv, m, k, n);
                    // f16 results are rounded to f16 (2^-11 relative) and may accumulate in f16.
                    let (atol, rtol) = if dtype == DType::F16 {
                        (3e-2, 4e-3)
                    } else {
                        (1e-4, 1e-4)
                    };
                    match compare(&f32s(&c)?, &want, atol, rtol) {
                        Ok(d) => detail = d,
                        Err(e) => return Ok(Err(format!("[{m}, {k}] x [{k}, {n}]: {e}"))),
                    }
                }
                Ok(Ok(detail))
            })();
            let name = format!("matmul {} {kernel}", format!("{dtype:?}").to_lowercase());
            out.push(check(name, r));
        }
    }
}

fn conv(dev: &Device, out: &mut Vec<Check>) {
    let (n, c, h, w, oc, kh) = (2, 3, 9, 11, 4, 3);
    let xv = values(n * c * h * w, -1.0, 1.0, 10);
    let wv = values(oc * c * kh * kh, -0.5, 0.5, 11);
    let bv = values(oc, -0.5, 0.5, 12);
    for (stride, pad, dil) in [(1, 1, 1), (2, 0, 1), (1, 2, 2)] {
        let oh = (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
        let ow = (w + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
        let mut want = vec![0f64; n * oc * oh * ow];
        for b in 0..n {
            for o in 0..oc {
                for y in 0..oh {
                    for x in 0..ow {
                        let mut s = bv[o] as f64;
                        for ci in 0..c {
                            for ky in 0..kh {
                                for kx in 0..kh {
                                    let iy = (y * stride + ky * dil) as isize - pad as isize;
                                    let ix = (x * stride + kx * dil) as isize - pad as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let xi = ((b * c + ci) * h + iy as usize) * w + ix as usize;
                                    let wi = ((o * c + ci) * kh + ky) * kh + kx;
                                    s += xv[xi] as f64 * wv[wi] as f64;
                                }
                            }
                        }
                        want[((b * oc + o) * oh + y) * ow + x] = s;
                    }
                }
            }
        }
        let r = (|| -> Result<std::result::Result<String, String>> {
            let x = Tensor::from_vec(xv.clone(), &[n, c, h, w], dev)?;
            let wt = Tensor::from_vec(wv.clone(), &[oc, c, kh, kh], dev)?;
            let bias = Tensor::from_vec(bv.clone(), &[oc], dev)?;
            let opts = Conv2dOptions::default()
                .stride(stride)
                .padding(pad)
                .dilation(dil);
            let y = x.conv2d(&wt, Some(&bias), &opts)?;
            Ok(compare(&f32s(&y)?, &want, 1e-4, 1e-4))
        })();
        out.push(check(
            format!("conv2d stride {stride} pad {pad} dilation {dil}"),
            r,
        ));
    }
}

fn host_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    l: usize,
    s: usize,
    e: usize,
    causal: bool,
) -> Vec<f64> {
    let scale = 1.0 / (e as f64).sqrt();
    let mut out = vec![0f64; l * e];
    for i in 0..l {
        let end = if causal { (i + 1 + s - l).min(s) } else { s };
        let scores: Vec<f64> = (0..end)
            .map(|j| {
                (0..e)
                    .map(|d| q[i * e + d] as f64 * k[j * e + d] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = w.iter().sum();
        for d in 0..e {
            out[i * e + d] = (0..end).map(|j| w[j] * v[j * e + d] as f64).sum::<f64>() / z;
        }
    }
    out
}

fn attention(dev: &Device, out: &mut Vec<Check>) {
    let (bh, l, e) = (2, 37, 16);
    let qv = values(bh * l * e, -1.0, 1.0, 13);
    let kv = values(bh * l * e, -1.0, 1.0, 14);
    let vv = values(bh * l * e, -1.0, 1.0, 15);
    for causal in [false, true] {
        let want: Vec<f64> = (0..bh)
            .flat_map(|b| {
                let r = b * l * e..(b + 1) * l * e;
                host_attention(&qv[r.clone()], &kv[r.clone()], &vv[r], l, l, e, causal)
            })
            .collect();
        let r = (|| -> Result<std::result::Result<String, String>> {
            let t = |v: &Vec<f32>| Tensor::from_vec(v.clone(), &[bh, l, e], dev);
            let y = Tensor::scaled_dot_product_attention(
                &t(&qv)?,
                &t(&kv)?,
                &t(&vv)?,
                None,
                causal,
                0.0,
                None,
            )?;
            Ok(compare(&f32s(&y)?, &want, 1e-4, 1e-4))
        })();
        out.push(check(format!("attention causal={causal}"), r));
    }
    // Decode over a KV cache: 4 query heads sharing 2 key-value heads, 10 of 16 positions.
    let (heads, kvh, cap, len, hd) = (4, 2, 16, 10, 8);
    let q = values(heads * hd, -1.0, 1.0, 16);
    let kc = values(cap * kvh * hd, -1.0, 1.0, 17);
    let vc = values(cap * kvh * hd, -1.0, 1.0, 18);
    let mut want = Vec::new();
    for h in 0..heads {
        let g = h / (heads / kvh);
        let pick = |c: &Vec<f32>| -> Vec<f32> {
            (0..len)
                .flat_map(|p| c[(p * kvh + g) * hd..(p * kvh + g + 1) * hd].to_vec())
                .collect()
        };
        want.extend(host_attention(
            &q[h * hd..(h + 1) * hd],
            &pick(&kc),
            &pick(&vc),
            1,
            len,
            hd,
            false,
        ));
    }
    let r = (|| -> Result<std::result::Result<String, String>> {
        let y = Tensor::attention_decode(
            &Tensor::from_vec(q.clone(), &[heads, hd], dev)?,
            &Tensor::from_vec(kc.clone(), &[cap, kvh, hd], dev)?,
            &Tensor::from_vec(vc.clone(), &[cap, kvh, hd], dev)?,
            len,
            1.0 / (hd as f32).sqrt(),
        )?;
        Ok(compare(&f32s(&y)?, &want, 1e-4, 1e-4))
    })();
    out.push(check("attention decode (grouped heads)", r));
}

/// Random blocks of `qtype` for a `[rows, cols]` matrix, with small finite scales.
pub fn random_blocks(qtype: QType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let n = rows * cols / qtype.block_len();
    let bb = qtype.block_bytes();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut out = vec![0u8; n * bb];
    for b in out.iter_mut() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (s >> 33) as u8;
    }
    let scale = wgtensor::f16::from_f32(0.004).to_le_bytes();
    // Where each format keeps its f16 scales (d, and dmin for Q4_K).
    let offsets: &[usize] = match qtype {
        QType::Q4_K => &[0, 2],
        QType::Q6_K => &[208],
        _ => &[0],
    };
    for blk in out.chunks_mut(bb) {
        for &o in offsets {
            blk[o..o + 2].copy_from_slice(&scale);
        }
    }
    out
}

fn quantized(dev: &Device, out: &mut Vec<Check>) {
    let (rows, cols) = (67, 512);
    for q in QType::ALL {
        for m in [1, 5] {
            let r = (|| -> Result<std::result::Result<String, String>> {
                let w = QTensor::from_ggml(
                    q,
                    [rows, cols],
                    &random_blocks(q, rows, cols, 4),
                    &Device::cpu(),
                )?;
                let wd = w.dequantize()?.to_vec::<f32>()?;
                let xv = values(m * cols, -1.0, 1.0, 19);
                // y = x · wᵀ
                let mut want = vec![0f64; m * rows];
                for i in 0..m {
                    for j in 0..rows {
                        want[i * rows + j] = (0..cols)
                            .map(|p| xv[i * cols + p] as f64 * wd[j * cols + p] as f64)
                            .sum();
                    }
                }
                let scale = want.iter().fold(0f64, |a, &b| a.max(b.abs()));
                let y = w
                    .to(dev)?
                    .matmul_t(&Tensor::from_vec(xv, &[m, cols], dev)?)?;
                // Activations may be quantized to 8 bits as ggml does (`quantized_activations`):
                // an error of a few parts in a thousand of the largest output.
                let atol = if wgtensor::quantized_activations() {
                    1e-2 * scale
                } else {
                    1e-4 * scale
                };
                Ok(compare(&f32s(&y)?, &want, atol, 1e-3))
            })();
            out.push(check(format!("quantized {} x[{m}, {cols}]", q.as_str()), r));
        }
    }
}

fn sampling(dev: &Device, out: &mut Vec<Check>) {
    let r = (|| -> Result<std::result::Result<String, String>> {
        wgtensor::manual_seed(42);
        let host = Tensor::randn(&[1000], &Device::cpu())?.to_vec::<f32>()?;
        wgtensor::manual_seed(42);
        let here = Tensor::randn(&[1000], dev)?.to_vec::<f32>()?;
        if let Some(i) = (0..1000).find(|&i| host[i].to_bits() != here[i].to_bits()) {
            return Ok(Err(format!(
                "seeded randn differs from the CPU's at {i}: {} vs {}",
                here[i], host[i]
            )));
        }
        let t = Tensor::from_vec(host.clone(), &[1000], dev)?;
        let (vals, idx) = t.topk(8, -1, true)?;
        let mut order: Vec<usize> = (0..1000).collect();
        order.sort_by(|&a, &b| host[b].total_cmp(&host[a]));
        let want_idx: Vec<f64> = order[..8].iter().map(|&i| i as f64).collect();
        let want_val: Vec<f64> = order[..8].iter().map(|&i| host[i] as f64).collect();
        let argmax = f32s(&t.argmax_all()?)?;
        let idx = f32s(&idx)?;
        Ok(compare(&f32s(&vals)?, &want_val, 0.0, 0.0)
            .and_then(|_| compare(&idx, &want_idx, 0.0, 0.0))
            .and_then(|_| compare(&argmax, &want_idx[..1], 0.0, 0.0))
            .map(|_| " (seeded randn bit-identical to the CPU's; topk and argmax exact)".into()))
    })();
    out.push(check("sampling (randn, topk, argmax)", r));
}

/// Every check on `dev`.
pub fn correctness(dev: &Device) -> Vec<Check> {
    let mut out = Vec::new();
    elementwise(dev, &mut out);
    reductions(dev, &mut out);
    rows(dev, &mut out);
    matmul(dev, &mut out);
    conv(dev, &mut out);
    attention(dev, &mut out);
    quantized(dev, &mut out);
    sampling(dev, &mut out);
    out
}
