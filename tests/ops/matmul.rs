//! `Tensor::matmul` on every device: the CPU against an f64 triple loop, every GPU (and every
//! GPU kernel variant) against the CPU.
//!
//! Tolerance. Each output is a K-term dot product. For any summation order (blocked gemm,
//! FMA chains, K chunks added on the GPU) the rounding error of such a sum is, with
//! overwhelming probability, below `λ·√K·u·Σ|a_i·b_i|` (Higham & Mary, "A new approach to
//! probabilistic rounding error analysis", 2019), `u = ε/2` the unit roundoff; the worst-case
//! bound grows with K instead of √K and would hide real bugs at large K. We take λ = 8, i.e.
//! `tol = 4·√K·ε·Σ_k|a_ik·b_kj|` per element, computed from the operands themselves (so it scales
//! with their magnitude), and compare the CPU with the exact f64 result at `tol` and each GPU
//! with the CPU at `2·tol` (both are within `tol` of the exact value). Tests that must catch a
//! single missing term at large K use small integers instead, whose products and sums are exact
//! in f32: there the comparison is exact.

use crate::common;
use common::{data, devices, gpus, values};
use proptest::prelude::*;
use wgtensor::{DType, Device, Error, Tensor};

/// `torch.matmul` on packed row-major f64 data, by index arithmetic: (values, Σ|a·b| per
/// output, K, result shape).
fn reference(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize]) -> (Vec<f64>, Vec<f64>, usize) {
    let sa2: Vec<usize> = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.to_vec()
    };
    let sb2: Vec<usize> = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.to_vec()
    };
    let (na, nb) = (sa2.len(), sb2.len());
    let (m, k, n) = (sa2[na - 2], sa2[na - 1], sb2[nb - 1]);
    let ba = &sa2[..na - 2];
    let bb = &sb2[..nb - 2];
    let nd = ba.len().max(bb.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= nd {
            s[i + s.len() - nd]
        } else {
            1
        }
    };
    let batch: Vec<usize> = (0..nd).map(|i| dim(ba, i).max(dim(bb, i))).collect();
    let batches: usize = batch.iter().product();
    let (mut out, mut mag) = (Vec::new(), Vec::new());
    for bi in 0..batches {
        // Unravel the batch index, then map it into each operand's (broadcast) batch dims.
        let mut idx = vec![0; nd];
        let mut r = bi;
        for d in (0..nd).rev() {
            idx[d] = r % batch[d];
            r /= batch[d];
        }
        let flat = |s: &[usize]| {
            let mut f = 0;
            for (i, &id) in idx.iter().enumerate() {
                let size = dim(s, i);
                f = f * size + if size == 1 { 0 } else { id };
            }
            f
        };
        let (oa, ob) = (flat(ba) * m * k, flat(bb) * k * n);
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (0f64, 0f64);
                for t in 0..k {
                    let p = a[oa + i * k + t] as f64 * b[ob + t * n + j] as f64;
                    s += p;
                    g += p.abs();
                }
                out.push(s);
                mag.push(g);
            }
        }
    }
    (out, mag, k)
}

fn tolerance(mag: f64, k: usize) -> f64 {
    4.0 * (k as f64).sqrt() * f32::EPSILON as f64 * mag + f32::MIN_POSITIVE as f64
}

fn assert_within(got: &[f32], want: &[f64], mag: &[f64], k: usize, scale: f64, ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = scale * tolerance(mag[i], k);
        assert!(
            g.is_finite() && (g as f64 - w).abs() <= tol,
            "{ctx}: first mismatch at index {i}: got {g}, expected {w} (tolerance {tol:e})"
        );
    }
}

/// Runs `view_a(a) @ view_b(b)` on every device and, on GPUs, with every kernel variant.
/// `a`/`b` are packed data of shapes `sa`/`sb`; the views may transpose, narrow, expand...
fn check_views(
    (a, sa): (&[f32], &[usize]),
    (b, sb): (&[f32], &[usize]),
    view_a: impl Fn(Tensor) -> Tensor,
    view_b: impl Fn(Tensor) -> Tensor,
    ctx: &str,
) {
    let cpu = Device::cpu();
    let ta = view_a(Tensor::from_vec(a.to_vec(), sa, &cpu).unwrap());
    let tb = view_b(Tensor::from_vec(b.to_vec(), sb, &cpu).unwrap());
    // The reference reads the views packed (views themselves are tested in tests/ops/views.rs).
    let (pa, pb) = (values(&ta), values(&tb));
    let (want, mag, k) = reference(&pa, ta.shape(), &pb, tb.shape());
    let expected = ta.matmul(&tb).unwrap();
    let cpu_vals = values(&expected);
    assert_within(
        &cpu_vals,
        &want,
        &mag,
        k,
        1.0,
        &format!("{ctx} on cpu vs f64"),
    );
    let cpu_f64: Vec<f64> = cpu_vals.iter().map(|&x| x as f64).collect();
    for d in gpus() {
        let ga = view_a(Tensor::from_vec(a.to_vec(), sa, &d).unwrap());
        let gb = view_b(Tensor::from_vec(b.to_vec(), sb, &d).unwrap());
        let auto = ga.matmul(&gb).unwrap();
        assert_eq!(auto.shape(), expected.shape(), "{ctx} on {d}: shape");
        assert!(auto.device() == &d, "{ctx}: result left {d}");
        let name = ga.matmul_kernel_choice(&gb).unwrap();
        let got = values(&auto.cpu().unwrap());
        assert_within(
            &got,
            &cpu_f64,
            &mag,
            k,
            2.0,
            &format!("{ctx} on {d} ({name})"),
        );
        for kernel in Tensor::matmul_kernels() {
            match ga.matmul_with_kernel(&gb, kernel) {
                Ok(t) => assert_within(
                    &values(&t),
                    &cpu_f64,
                    &mag,
                    k,
                    2.0,
                    &format!("{ctx} on {d} with kernel {kernel}"),
                ),
                // Only the vec4 kernel may refuse operands (unaligned ones), and only with a
                // clear error.
                Err(Error::InvalidArgument { op: "matmul", .. })
                    if kernel.starts_with("register_vec4") => {}
                Err(e) => panic!("{ctx} on {d} with kernel {kernel}: {e}"),
            }
        }
    }
}

/// Packed operands of the given shapes, products checked on every device.
fn check(sa: &[usize], sb: &[usize], seed: u64) {
    let a = data(sa.iter().product(), seed, 1.0);
    let b = data(sb.iter().product(), seed + 1, 2.0);
    check_views(
        (&a, sa),
        (&b, sb),
        |t| t,
        |t| t,
        &format!("{sa:?} @ {sb:?}"),
    );
}

#[test]
fn matmul_kernels_are_valid_wgsl() {
    let mut seen = 0;
    for (file, src) in wgtensor::testing::shader_sources() {
        if !file.starts_with("matmul") {
            continue;
        }
        seen += 1;
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(&src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{file}: {e:?}"));
    }
    assert_eq!(
        seen, 4,
        "matmul.wgsl, its f16-operand and f16-accumulation builds and matmul_vec4.wgsl are \
         embedded"
    );
}

#[test]
fn small_and_degenerate_shapes() {
    check(&[1, 1], &[1, 1], 1);
    check(&[1, 7], &[7, 1], 2); // a dot product as matrices
    check(&[1, 5], &[5, 9], 3); // 1×N output
    check(&[9, 5], &[5, 1], 4); // N×1 output
    check(&[6, 1], &[1, 7], 5); // outer product, K = 1
}

#[test]
fn tile_aligned_and_unaligned_shapes() {
    check(&[67, 129], &[129, 33], 10); // no dim a multiple of any tile
    check(&[64, 64], &[64, 64], 11); // exactly one 64 tile
    check(&[32, 16], &[16, 32], 12); // one register workgroup
    check(&[128, 96], &[96, 64], 13); // several tiles, vec4-aligned
    check(&[65, 17], &[17, 63], 14); // tile ± 1
}

#[test]
fn batched_with_broadcast_batch_dims() {
    let (sa, sb) = ([2usize, 1, 3, 4], [5usize, 4, 2]);
    let cpu = Device::cpu();
    let a = Tensor::from_vec(data(24, 20, 1.0), &sa, &cpu).unwrap();
    let b = Tensor::from_vec(data(40, 21, 1.0), &sb, &cpu).unwrap();
    assert_eq!(a.matmul(&b).unwrap().shape(), &[2, 5, 3, 2]);
    check(&sa, &sb, 20);
    check(&[3, 4, 8], &[3, 8, 4], 22); // equal batch dims, vec4-aligned
    check(&[4, 5], &[2, 3, 5, 6], 23); // a 2-D lhs broadcast over a batch
    check(&[2, 1, 4, 4], &[1, 3, 4, 4], 24); // both sides broadcast
    check(&[2, 3, 5, 4], &[4, 6], 25); // a batch against one matrix (folded into its rows)
    check(&[70, 3, 2], &[2, 65], 26); // the same past the small-product threshold
}

#[test]
fn one_dimensional_operands() {
    let cpu = Device::cpu();
    let v = Tensor::from_vec(data(6, 30, 1.0), &[6], &cpu).unwrap();
    let m = Tensor::from_vec(data(18, 31, 1.0), &[6, 3], &cpu).unwrap();
    assert_eq!(v.matmul(&v).unwrap().shape(), &[] as &[usize]);
    assert_eq!(v.matmul(&m).unwrap().shape(), &[3]);
    assert_eq!(m.t().unwrap().matmul(&v).unwrap().shape(), &[3]);
    check(&[6], &[6], 30); // dot product, 0-d result
    check(&[6], &[6, 3], 31); // vector @ matrix
    check(&[3, 6], &[6], 32); // matrix @ vector
    check(&[5], &[2, 5, 4], 33); // vector @ batch of matrices
    check(&[2, 3, 5], &[5], 34); // batch of matrices @ vector
    check(&[8], &[8, 8], 35); // vec4-aligned vector
}

#[test]
fn transposed_and_permuted_views_are_read_in_place() {
    let a = data(12 * 20, 40, 1.0);
    let b = data(20 * 8, 41, 1.0);
    let t = |x: Tensor| x.t().unwrap();
    // a.t() @ b, a @ b.t(), a.t() @ b.t(): every stride combination of the vec4 kernel.
    check_views((&a, &[20, 12]), (&b, &[20, 8]), t, |x| x, "a.t() @ b");
    check_views((&a, &[12, 20]), (&b, &[8, 20]), |x| x, t, "a @ b.t()");
    check_views((&a, &[20, 12]), (&b, &[8, 20]), t, t, "a.t() @ b.t()");
    // Unaligned transposes go through the scalar kernels.
    check_views(
        (&a[..15 * 16], &[15, 16]),
        (&b[..7 * 15], &[7, 15]),
        t,
        t,
        "odd a.t() @ b.t()",
    );
    // Permuted batch dims: [4, 3, 5] viewed as [3, 4, 5], and a batch-last layout.
    let perm = |x: Tensor| x.permute(&[1, 0, 2]).unwrap();
    let c = data(4 * 3 * 5, 42, 1.0);
    let e = data(3 * 5 * 2, 43, 1.0);
    check_views(
        (&c, &[4, 3, 5]),
        (&e, &[3, 5, 2]),
        perm,
        |x| x,
        "permuted batch",
    );
    // Batch-last storage: [K, M, batch] and [N, K, batch] viewed as [batch, M, K], [batch, K, N].
    let last = |x: Tensor| x.permute(&[2, 1, 0]).unwrap();
    check_views(
        (&e, &[5, 2, 3]),
        (&c, &[4, 5, 3]),
        last,
        last,
        "batch-last views",
    );
}

/// The decode shape, `x [1, K] @ W.t()` with `W [N, K]` (the row-parallel CPU kernel), for
/// K around its 16-element steps and W a column-narrowed view (rows strided past K); f16 the
/// same against the f32 product of the f16-rounded operands.
#[test]
fn one_row_times_transposed_weight() {
    for (k, n) in [(1, 3), (15, 5), (16, 9), (33, 17), (768, 40)] {
        let x = data(k, 50, 1.0);
        let w = data(n * (k + 3), 51, 1.0);
        let t = |t: Tensor| t.narrow(1, 1, k).unwrap().t().unwrap();
        check_views(
            (&x, &[1, k]),
            (&w, &[n, k + 3]),
            |t| t,
            t,
            &format!("[1, {k}] @ W.t() {n} rows"),
        );
        let cpu = Device::cpu();
        let xs = Tensor::from_vec(x.clone(), &[1, k], &cpu).unwrap();
        let ws = t(Tensor::from_vec(w.clone(), &[n, k + 3], &cpu).unwrap());
        let h = |t: &Tensor| t.to_dtype(DType::F16).unwrap();
        let want = h(&h(&xs)
            .to_dtype(DType::F32)
            .unwrap()
            .matmul(&h(&ws).to_dtype(DType::F32).unwrap())
            .unwrap());
        let got = h(&xs).matmul(&h(&ws)).unwrap();
        assert_eq!(got.dtype(), DType::F16);
        let f = |t: &Tensor| values(&t.to_dtype(DType::F32).unwrap());
        let (g, e) = (f(&got), f(&want));
        for (i, (a, b)) in g.iter().zip(&e).enumerate() {
            // Both are one rounding to f16 of nearly the same f32 sum: at most one f16 ulp apart.
            assert!(
                (a - b).abs() <= b.abs() / 1024.0 + 1e-6,
                "f16 k {k} index {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn narrowed_and_expanded_views() {
    let a = data(10 * 12, 50, 1.0);
    let b = data(12 * 9, 51, 1.0);
    // Narrowed rows and columns: odd offsets, row strides longer than the row.
    check_views(
        (&a, &[10, 12]),
        (&b, &[12, 9]),
        |x| x.narrow(0, 1, 7).unwrap().narrow(1, 3, 8).unwrap(),
        |x| x.narrow(0, 2, 8).unwrap().narrow(1, 1, 5).unwrap(),
        "narrowed",
    );
    // Stride-0 matrix dims: one row repeated, one column repeated.
    check_views(
        (&a[..12], &[1, 12]),
        (&b[..12], &[12, 1]),
        |x| x.expand(&[5, 12]).unwrap(),
        |x| x.expand(&[12, 4]).unwrap(),
        "expanded rows and columns",
    );
    // A stride-0 batch dim on a transposed operand.
    check_views(
        (&a[..12 * 8], &[12, 8]),
        (&b[..12 * 4], &[12, 4]),
        |x| x.t().unwrap().expand(&[3, 8, 12]).unwrap(),
        |x| x,
        "expanded transposed batch",
    );
}

#[test]
fn larger_product_on_every_device() {
    check(&[256, 256], &[256, 256], 60);
    check(&[3, 100, 260], &[3, 260, 36], 61);
}

/// K = 70,000: more than lavapipe lets one shader loop run, so the GPU must split K. Small
/// integers make every product and partial sum exact in f32: results must be identical.
#[test]
fn long_inner_dim_is_split_on_the_gpu() {
    let k = 70_000;
    let ints = |n: usize, seed: u64| -> Vec<f32> {
        data(n, seed, 1.0)
            .into_iter()
            .map(|x| (x * 4.0).round())
            .collect()
    };
    let a = ints(3 * k, 70);
    let b = ints(k * 2, 71);
    let (want, _, _) = reference(&a, &[3, k], &b, &[k, 2]);
    let want: Vec<f32> = want.iter().map(|&x| x as f32).collect();
    for d in devices() {
        let ta = Tensor::from_vec(a.clone(), &[3, k], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[k, 2], &d).unwrap();
        assert_eq!(values(&ta.matmul(&tb).unwrap()), want, "on {d}");
        if d.is_gpu() {
            for kernel in [
                "naive",
                "register",
                "tiled",
                "tiled_padded",
                "tiled_double",
                "gemv_m1",
                "gemv_n1",
                "gemv_t",
            ] {
                let got = values(&ta.matmul_with_kernel(&tb, kernel).unwrap());
                assert_eq!(got, want, "on {d} with kernel {kernel}");
            }
            // The vec4 kernel, with B given as the transpose of a packed [2, K] matrix (so
            // every vec4 is aligned), K split as well.
            let bt: Vec<f32> = (0..2 * k).map(|i| b[(i % k) * 2 + i / k]).collect();
            let tbt = Tensor::from_vec(bt, &[2, k], &d).unwrap().t().unwrap();
            assert_eq!(ta.matmul_kernel_choice(&tbt).unwrap(), "register_vec4");
            for kernel in Tensor::matmul_kernels()
                .into_iter()
                .filter(|k| k.starts_with("register_vec4") || *k == "gemv_t")
            {
                let got = values(&ta.matmul_with_kernel(&tbt, kernel).unwrap());
                assert_eq!(got, want, "on {d} with kernel {kernel}");
            }
        }
    }
}

#[test]
fn empty_dims_give_empty_or_zero_results() {
    for d in devices() {
        let z = |s: &[usize]| Tensor::zeros(s, DType::F32, &d).unwrap();
        let o = |s: &[usize]| Tensor::ones(s, DType::F32, &d).unwrap();
        let r = z(&[0, 3]).matmul(&o(&[3, 4])).unwrap();
        assert_eq!(r.shape(), &[0, 4], "M = 0 on {d}");
        let r = o(&[3, 5]).matmul(&z(&[5, 0])).unwrap();
        assert_eq!(r.shape(), &[3, 0], "N = 0 on {d}");
        let r = o(&[0, 2, 3]).matmul(&o(&[3, 4])).unwrap();
        assert_eq!(r.shape(), &[0, 2, 4], "no batches on {d}");
        // K = 0: an empty sum is 0 everywhere.
        let r = o(&[3, 0]).matmul(&o(&[0, 4])).unwrap();
        assert_eq!(r.shape(), &[3, 4]);
        assert_eq!(values(&r), vec![0.0; 12], "K = 0 on {d}");
        let r = o(&[0]).matmul(&o(&[0])).unwrap();
        assert_eq!(r.shape(), &[] as &[usize]);
        assert_eq!(values(&r), vec![0.0], "empty dot product on {d}");
        for kernel in Tensor::matmul_kernels() {
            let r = o(&[2, 3, 0])
                .matmul_with_kernel(&o(&[0, 4]), kernel)
                .unwrap();
            assert_eq!(values(&r), vec![0.0; 24], "K = 0 with {kernel} on {d}");
        }
    }
}

#[test]
fn shape_errors_name_both_shapes() {
    for d in devices() {
        let o = |s: &[usize]| Tensor::ones(s, DType::F32, &d).unwrap();
        let cases: [(&[usize], &[usize]); 5] = [
            (&[2, 3], &[4, 5]),       // inner dims
            (&[3], &[4]),             // dot product lengths
            (&[2, 3], &[2]),          // matrix @ vector
            (&[2, 3, 4], &[3, 4, 5]), // batch dims that do not broadcast
            (&[5], &[2, 4, 3]),       // vector @ batch
        ];
        for (sa, sb) in cases {
            match o(sa).matmul(&o(sb)) {
                Err(e @ Error::ShapeMismatch { op: "matmul", .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&format!("{sa:?}")) && msg.contains(&format!("{sb:?}")),
                        "{msg}"
                    );
                }
                other => panic!("{sa:?} @ {sb:?} on {d}: expected ShapeMismatch, got {other:?}"),
            }
        }
        let scalar = Tensor::full(&[], 2.0, DType::F32, &d).unwrap();
        match scalar.matmul(&o(&[3])) {
            Err(Error::InvalidArgument {
                op: "matmul",
                message,
            }) => {
                assert!(
                    message.contains("[]") && message.contains("[3]"),
                    "{message}"
                )
            }
            other => panic!("0-d operand on {d}: expected InvalidArgument, got {other:?}"),
        }
        assert!(matches!(
            o(&[2, 2]).matmul_with_kernel(&o(&[2, 2]), "strassen"),
            Err(Error::InvalidArgument { op: "matmul", .. })
        ));
    }
}

#[test]
fn dtype_and_device_errors() {
    let cpu = Device::cpu();
    let i = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2], &cpu).unwrap();
    let f = Tensor::ones(&[2, 2], DType::F32, &cpu).unwrap();
    assert!(matches!(
        i.matmul(&i),
        Err(Error::UnsupportedDType { op: "matmul", .. })
    ));
    assert!(matches!(
        f.matmul(&i),
        Err(Error::DTypeMismatch { op: "matmul", .. })
    ));
    for d in gpus() {
        let g = f.to(&d).unwrap();
        for (x, y) in [(&f, &g), (&g, &f)] {
            match x.matmul(y) {
                Err(e @ Error::DeviceMismatch { op: "matmul", .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains("cpu") && msg.contains(&d.to_string()), "{msg}");
                }
                other => panic!("expected DeviceMismatch, got {other:?}"),
            }
        }
    }
}

/// More rows, and more batches, than one dispatch grid dimension holds (65,535 workgroups):
/// the GPU splits the grid over several dispatches.
#[test]
fn grids_larger_than_one_dispatch() {
    let rows = 2_200_000; // > 65,535 workgroups of 32 rows
    let a: Vec<f32> = (0..rows * 2).map(|i| (i % 13) as f32).collect();
    let b = vec![1f32, -2.0];
    let want: Vec<f32> = a.chunks(2).map(|r| r[0] - 2.0 * r[1]).collect();
    let batches = 70_000; // > 65,535 workgroups in z
    let c: Vec<f32> = (0..batches * 2).map(|i| (i % 7) as f32).collect();
    let want_c: Vec<f32> = c.chunks(2).map(|r| r[0] - 2.0 * r[1]).collect();
    for d in devices() {
        let ta = Tensor::from_vec(a.clone(), &[rows, 2], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[2, 1], &d).unwrap();
        assert_eq!(values(&ta.matmul(&tb).unwrap()), want, "rows on {d}");
        let tc = Tensor::from_vec(c.clone(), &[batches, 1, 2], &d).unwrap();
        assert_eq!(values(&tc.matmul(&tb).unwrap()), want_c, "batches on {d}");
        if d.is_gpu() {
            let got = values(&ta.matmul_with_kernel(&tb, "naive").unwrap());
            assert_eq!(got, want, "rows on {d} with the naive kernel");
        }
    }
}

proptest! {
    // Each case runs every kernel on every GPU, and GPUs here may be software: keep it modest.
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn random_shapes_match_the_reference(
        m in 1usize..40,
        k in 0usize..40,
        n in 1usize..40,
        batch in 1usize..4,
        transpose_a in any::<bool>(),
        transpose_b in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let a = data(batch * m * k, seed, 1.0);
        let b = data(k * n, seed + 1, 1.0);
        // Transposed operands are stored the other way round and viewed back.
        let sa = if transpose_a { [batch, k, m] } else { [batch, m, k] };
        let sb = if transpose_b { [n, k] } else { [k, n] };
        check_views(
            (&a, &sa),
            (&b, &sb),
            |x| if transpose_a { x.transpose(1, 2).unwrap() } else { x },
            |x| if transpose_b { x.t().unwrap() } else { x },
            &format!("[{batch}, {m}, {k}] @ [{k}, {n}] (transposed: {transpose_a}, {transpose_b})"),
        );
    }
}

/// f16 operands read in place by every non-vec4 kernel, forced one by one: odd element offsets
/// (a narrowed view starts mid-word), transposed views, broadcast batches, tile-unaligned sizes.
/// The reference multiplies the f16-rounded values in f64.
#[test]
fn f16_operands_are_read_in_place_by_every_kernel() {
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![1, 1], vec![1, 1]),
        (vec![7, 13], vec![13, 5]),
        (vec![65, 33], vec![33, 63]),
        (vec![3, 9, 8], vec![8, 10]),
    ];
    for (sa, sb) in cases {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        // One extra element in front: the operands are narrowed views at odd offsets.
        let a_host: Vec<f32> = data(na + 1, 80, 1.0)
            .iter()
            .map(|&x| wgtensor::f16::from_f32(x).to_f32())
            .collect();
        let b_host: Vec<f32> = data(nb + 1, 81, 1.0)
            .iter()
            .map(|&x| wgtensor::f16::from_f32(x).to_f32())
            .collect();
        let want = values(
            &Tensor::from_vec(a_host[1..].to_vec(), &sa, &Device::cpu())
                .unwrap()
                .matmul(&Tensor::from_vec(b_host[1..].to_vec(), &sb, &Device::cpu()).unwrap())
                .unwrap(),
        );
        for d in gpus() {
            let h = |v: &[f32], s: &[usize]| {
                let n: usize = s.iter().product();
                Tensor::from_vec(v.to_vec(), &[n + 1], &d)
                    .unwrap()
                    .to_dtype(DType::F16)
                    .unwrap()
                    .narrow(0, 1, n)
                    .unwrap()
                    .reshape(s)
                    .unwrap()
            };
            let (ta, tb) = (h(&a_host, &sa), h(&b_host, &sb));
            let k = sa[sa.len() - 1] as f32;
            for kernel in Tensor::matmul_kernels() {
                let got = match ta.matmul_with_kernel(&tb, kernel) {
                    Ok(t) => t,
                    Err(Error::InvalidArgument { .. }) if kernel.starts_with("register_vec4") => {
                        continue
                    }
                    Err(e) => panic!("{sa:?} @ {sb:?} f16 with {kernel} on {d}: {e}"),
                };
                assert_eq!(got.dtype(), DType::F16);
                let got = values(&got.to_dtype(DType::F32).unwrap());
                // One f16 rounding of the product on top of f32 accumulation.
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-3 * w.abs() + 1e-4 * k,
                        "{sa:?} @ {sb:?} f16 with {kernel} on {d}: {g} vs {w}"
                    );
                }
            }
            // A transposed f16 view is read in place too.
            let tt = h(&b_host, &sb);
            if sb.len() == 2 && sa.len() == 2 {
                let c = tt.t().unwrap().matmul(&ta.t().unwrap()).unwrap();
                let want_t = values(
                    &Tensor::from_vec(want.clone(), &[sa[0], sb[1]], &Device::cpu())
                        .unwrap()
                        .t()
                        .unwrap()
                        .contiguous()
                        .unwrap(),
                );
                let got = values(&c.to_dtype(DType::F32).unwrap());
                for (g, w) in got.iter().zip(&want_t) {
                    assert!(
                        (g - w).abs() <= 1e-3 * w.abs() + 1e-4 * k,
                        "transposed f16 on {d}"
                    );
                }
            }
        }
    }
}

/// Split-K on long-K shapes: tile-unaligned M and N, K not a multiple of the slice count,
/// transposed views, f16 operands; batched problems fall back to the register kernel.
#[test]
fn split_k_matches_the_reference() {
    for (m, k, n) in [(5usize, 4099usize, 7usize), (1, 2048, 1), (70, 3000, 65)] {
        let a = data(m * k, 90, 1.0);
        let b = data(k * n, 91, 1.0);
        check_views(
            (&a, &[m, k]),
            (&b, &[k, n]),
            |t| t,
            |t| t,
            &format!("split-K {m}x{k}x{n}"),
        );
        for d in gpus() {
            let ta = Tensor::from_vec(a.clone(), &[m, k], &d).unwrap();
            let tb = Tensor::from_vec(b.clone(), &[k, n], &d).unwrap();
            let want = values(&ta.matmul_with_kernel(&tb, "register").unwrap());
            let got = values(&ta.matmul_with_kernel(&tb, "split_k").unwrap());
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * (k as f32).sqrt(),
                    "split_k {m}x{k}x{n} on {d}"
                );
            }
            // Transposed operands and a batch of two (which runs unsplit).
            let at = Tensor::from_vec(a.clone(), &[k, m], &d)
                .unwrap()
                .t()
                .unwrap();
            let bt = Tensor::from_vec(b.clone(), &[n, k], &d)
                .unwrap()
                .t()
                .unwrap();
            let want_t = values(&at.matmul_with_kernel(&bt, "register").unwrap());
            let got_t = values(&at.matmul_with_kernel(&bt, "split_k").unwrap());
            for (g, w) in got_t.iter().zip(&want_t) {
                assert!(
                    (g - w).abs() <= 1e-4 * (k as f32).sqrt(),
                    "transposed split_k on {d}"
                );
            }
            let a2 = ta.unsqueeze(0).unwrap().expand(&[2, m, k]).unwrap();
            let got2 = values(&a2.matmul_with_kernel(&tb, "split_k").unwrap());
            assert_eq!(
                &got2[..m * n],
                &want[..],
                "batched split_k runs unsplit on {d}"
            );
            let h = |t: &Tensor| t.to_dtype(DType::F16).unwrap();
            let gh = h(&ta).matmul_with_kernel(&h(&tb), "split_k").unwrap();
            assert_eq!(gh.dtype(), DType::F16);
        }
    }
}

/// Products whose CPU gemm is split across threads by rows or by columns, and the folded
/// `[.., K] · [K, N]` of a linear layer, each hashed by its bits.
#[test]
fn cpu_matmul_bits_child() {
    if !common::is_child("matmul::cpu_matmul_bits_child") {
        return;
    }
    let cpu = Device::cpu();
    // (M, K, N): many rows; few rows (column split); more columns than rows (column split, a
    // weight gradient's shape); depth past one gemm block (2048); odd N.
    for (i, &(m, k, n)) in [
        (2048usize, 64usize, 64usize),
        (20, 2048, 256),
        (64, 2048, 256),
        (300, 2048, 65),
        (64, 2048, 64),
    ]
    .iter()
    .enumerate()
    {
        let a = Tensor::from_vec(data(m * k, 70 + i as u64, 1.0), &[m, k], &cpu).unwrap();
        let b = Tensor::from_vec(data(k * n, 80 + i as u64, 1.0), &[n, k], &cpu).unwrap();
        // B transposed, as a linear layer's weight; and A transposed, as its weight gradient.
        let c = values(&a.matmul(&b.t().unwrap()).unwrap());
        let at = values(
            &a.t()
                .unwrap()
                .contiguous()
                .unwrap()
                .t()
                .unwrap()
                .matmul(&b.t().unwrap())
                .unwrap(),
        );
        assert_eq!(c.len(), m * n);
        let h = [c, at].concat().iter().fold(0xcbf29ce484222325u64, |h, v| {
            (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
        });
        println!("BITS matmul {m}x{k}x{n} {h:016x}");
    }
    let x = Tensor::from_vec(data(32 * 64 * 64, 90, 1.0), &[32, 64, 64], &cpu).unwrap();
    let w = Tensor::from_vec(data(192 * 64, 91, 1.0), &[192, 64], &cpu).unwrap();
    let y = values(&x.matmul(&w.t().unwrap()).unwrap());
    let h = y.iter().fold(0xcbf29ce484222325u64, |h, v| {
        (h ^ v.to_bits() as u64).wrapping_mul(0x100000001b3)
    });
    println!("BITS linear {h:016x}");
    common::child_done("matmul::cpu_matmul_bits_child");
}

/// The CPU matmul gives the same bits at 1, 2 and 3 threads: the parts of a split product
/// each sum an element's products in the order one gemm call does.
#[test]
fn cpu_matmul_gives_the_same_bits_at_any_thread_count() {
    let lines = |threads: &str| -> Vec<String> {
        let out = common::run_child(
            "matmul::cpu_matmul_bits_child",
            &[("RAYON_NUM_THREADS", threads)],
        );
        let v: Vec<String> = out
            .lines()
            .filter_map(|l| l.find("BITS ").map(|i| l[i..].to_string()))
            .collect();
        assert_eq!(v.len(), 6, "{out}");
        v
    };
    let one = lines("1");
    assert_eq!(one, lines("2"), "1 vs 2 threads");
    assert_eq!(one, lines("3"), "1 vs 3 threads");
}
