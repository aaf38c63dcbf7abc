//! Tensors larger than one GPU binding (FAULTS rows 5-7): 136 MiB and 300 MiB f32 tensors on
//! adapters whose `max_storage_buffer_binding_size` is 128 MiB, and one larger than
//! `max_buffer_size`, which must be refused before wgpu sees it.

use crate::common;
use common::{assert_close, gpus};
use wgtensor::{DType, Error, Tensor};

const MIB: usize = 1 << 20;

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i % 4099) as f32 - 2049.0) * scale)
        .collect()
}

#[test]
fn transfers_of_300_mib_round_trip() {
    for d in gpus() {
        let n = 300 * MIB / 4;
        let host = ramp(n, 0.5);
        let t = Tensor::from_vec(host.clone(), &[2400, n / 2400], &d).unwrap();
        assert_eq!(
            t.to_vec::<f32>().unwrap(),
            host,
            "300 MiB round trip on {d}"
        );
        // A block of rows from the middle, read through a view.
        let rows = t.narrow(0, 1000, 3).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(rows, host[1000 * (n / 2400)..1003 * (n / 2400)].to_vec());
    }
}

#[test]
fn elementwise_on_tensors_larger_than_one_binding() {
    for d in gpus() {
        let limit = wgtensor::adapters()
            .into_iter()
            .find(|a| a.names[0] == d.to_string())
            .map(|a| a.max_storage_buffer_binding_size)
            .unwrap();
        let n = 136 * MIB / 4;
        assert!(
            n as u64 * 4 > limit || limit > 136 << 20,
            "the test must exceed the binding limit"
        );
        let (a, b) = (ramp(n, 0.25), ramp(n, -0.125));
        let cols = 32768;
        let ta = Tensor::from_vec(a.clone(), &[n / cols, cols], &d).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[n / cols, cols], &d).unwrap();
        let sum = ta.add(&tb).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(sum, want, "136 MiB add on {d}");
        // Broadcast a small row over the big tensor; scalar and unary forms; 1-D tensors.
        let row = Tensor::from_vec(ramp(cols, 1.0), &[cols], &d).unwrap();
        let out = (&ta * &row).unwrap().to_vec::<f32>().unwrap();
        let rowv = ramp(cols, 1.0);
        let want: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, x)| x * rowv[i % cols])
            .collect();
        assert_eq!(out, want, "136 MiB broadcast mul on {d}");
        let flat = Tensor::from_vec(a.clone(), &[n], &d).unwrap();
        let r = flat
            .mul_scalar(2.0)
            .unwrap()
            .relu()
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let want: Vec<f32> = a.iter().map(|x| (x * 2.0).max(0.0)).collect();
        assert_close(
            &r,
            &want,
            0.0,
            0.0,
            &format!("136 MiB 1-D scalar+relu on {d}"),
        );
        // A view with an offset into the big buffer, made contiguous on the device.
        let tail = ta
            .narrow(0, 10, 5)
            .unwrap()
            .contiguous()
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(tail, a[10 * cols..15 * cols].to_vec());
    }
}

#[test]
fn unsplittable_views_and_oversized_buffers_are_typed_errors() {
    for d in gpus() {
        let n = 136 * MIB / 4;
        let cols = 32768;
        let t = Tensor::zeros(&[n / cols, cols], DType::F32, &d).unwrap();
        // A transposed view of a tensor past the binding limit: every block would span the
        // whole buffer, so the op is refused with the limit named (never a wgpu error).
        match t.t().unwrap().contiguous() {
            Err(Error::BufferTooLarge { limit_name, .. }) => {
                assert!(limit_name.starts_with("max_storage_buffer_binding_size"))
            }
            other => panic!("expected BufferTooLarge on {d}, got {other:?}"),
        }
        // Past max_buffer_size: refused before wgpu sees the request.
        let max = wgtensor::adapters()
            .into_iter()
            .find(|a| a.names[0] == d.to_string())
            .map(|a| a.max_buffer_size)
            .unwrap();
        let elems = (max / 4 + 1024) as usize;
        match Tensor::zeros(&[elems], DType::F32, &d) {
            Err(e @ Error::BufferTooLarge { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("max_buffer_size") && msg.contains(&max.to_string()),
                    "{msg}"
                );
                assert!(msg.contains(&d.to_string()), "{msg}");
            }
            other => panic!("expected BufferTooLarge past max_buffer_size on {d}, got {other:?}"),
        }
        // The device is still fine.
        assert_eq!(
            t.narrow(0, 0, 1).unwrap().to_vec::<f32>().unwrap()[..2],
            [0.0, 0.0]
        );
    }
}

#[test]
fn reductions_and_matmul_past_one_binding() {
    for d in gpus() {
        let n = 136 * MIB / 4;
        let cols = 32768;
        let host = ramp(n, 1.0 / 1024.0);
        let cpu =
            Tensor::from_vec(host.clone(), &[n / cols, cols], &wgtensor::Device::cpu()).unwrap();
        let t = cpu.to(&d).unwrap();
        for (name, got, want) in [
            ("sum_all", t.sum_all(), cpu.sum_all()),
            ("mean_all", t.mean_all(), cpu.mean_all()),
            ("max_all", t.max_all(), cpu.max_all()),
            ("min_all", t.min_all(), cpu.min_all()),
        ] {
            let (g, w) = (
                got.unwrap().to_scalar::<f32>().unwrap(),
                want.unwrap().to_scalar::<f32>().unwrap(),
            );
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{name} on {d}: {g} vs {w}"
            );
        }
        let rows = t.sum(1, false).unwrap();
        assert_eq!(rows.shape(), &[n / cols]);
        assert_close(
            &rows.to_vec::<f32>().unwrap(),
            &cpu.sum(1, false).unwrap().to_vec::<f32>().unwrap(),
            1e-4,
            1e-3,
            &format!("sum(dim 1) on {d}"),
        );
        let w = Tensor::from_vec(
            ramp(cols * 2, 1.0 / 4096.0),
            &[cols, 2],
            &wgtensor::Device::cpu(),
        )
        .unwrap();
        let got = t.matmul(&w.to(&d).unwrap()).unwrap();
        assert_eq!(got.shape(), &[n / cols, 2]);
        let want = cpu.matmul(&w).unwrap().to_vec::<f32>().unwrap();
        assert_close(
            &got.to_vec::<f32>().unwrap(),
            &want,
            1e-3,
            1e-2,
            &format!("tall matmul on {d}"),
        );
        // Reducing dim 0: blocks of rows to partial rows, then the partials.
        let got = t.sum(0, false).unwrap().to_vec::<f32>().unwrap();
        let want = cpu.sum(0, false).unwrap().to_vec::<f32>().unwrap();
        assert_close(&got, &want, 1e-4, 1e-2, &format!("sum over dim 0 on {d}"));
    }
}

/// The typed kernels (i32 here) on more than 65,535 workgroups: the grid is split in 2-D and
/// every word is still written exactly once.
#[test]
fn typed_kernels_past_65535_workgroups() {
    for d in gpus() {
        let n = 65_535 * 256 + 701;
        let host: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(-7919)).collect();
        let t = Tensor::from_slice(&host, &[n], &d).unwrap();
        let got = t.add_scalar(3.0).unwrap().to_vec::<i32>().unwrap();
        assert!(
            got.iter().zip(&host).all(|(g, h)| *g == h.wrapping_add(3)),
            "i32 add_scalar over {n} elements on {d}"
        );
        let u = t.to_dtype(DType::U32).unwrap().to_vec::<u32>().unwrap();
        assert!(
            u.iter().zip(&host).all(|(g, h)| *g == *h as u32),
            "to_dtype on {d}"
        );
    }
}

/// to_dtype past one binding, narrowing and widening (the wider side decides the blocks).
#[test]
fn to_dtype_of_tensors_larger_than_one_binding() {
    for d in gpus() {
        let n = 132 * MIB / 4;
        let host = ramp(n, 0.001);
        let t = Tensor::from_vec(host.clone(), &[n / 4096, 4096], &d).unwrap();
        let h = t.to_dtype(DType::F16).unwrap();
        let back = h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(
            back.iter()
                .zip(&host)
                .all(|(b, x)| *b == half::f16::from_f32(*x).to_f32()),
            "f32 -> f16 -> f32 of 132 MiB on {d}"
        );
    }
}

#[test]
fn comparisons_clamp_and_where_past_one_binding() {
    for d in gpus() {
        let n = 136 * MIB / 4;
        let cols = 32768;
        let a = ramp(n, 0.25);
        let ta = Tensor::from_vec(a.clone(), &[n / cols, cols], &d).unwrap();
        // A comparison against a scalar and against a broadcast row (U8 masks).
        let gt = ta.gt_scalar(0.0).unwrap();
        assert_eq!(gt.shape(), ta.shape());
        let m = gt.to_vec::<u8>().unwrap();
        let want: Vec<u8> = a.iter().map(|&x| u8::from(x > 0.0)).collect();
        assert_eq!(m, want, "136 MiB gt_scalar on {d}");
        let row = Tensor::from_vec(ramp(cols, 0.3), &[cols], &d).unwrap();
        let le = ta.le(&row).unwrap().to_vec::<u8>().unwrap();
        let rowv = ramp(cols, 0.3);
        let want: Vec<u8> = a
            .iter()
            .enumerate()
            .map(|(i, &x)| u8::from(x <= rowv[i % cols]))
            .collect();
        assert_eq!(le, want, "136 MiB broadcast le on {d}");
        // clamp, and where over the mask (the values broadcast from a scalar-like tensor).
        let c = ta.clamp(-1.0, 2.0).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = a.iter().map(|&x| x.clamp(-1.0, 2.0)).collect();
        assert_eq!(c, want, "136 MiB clamp on {d}");
        let zero = Tensor::zeros(&[1], DType::F32, &d).unwrap();
        let relu = gt.where_cond(&ta, &zero).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = a.iter().map(|&x| if x > 0.0 { x } else { 0.0 }).collect();
        assert_eq!(relu, want, "136 MiB where_cond on {d}");
    }
}

#[test]
fn fills_and_arange_past_one_binding() {
    for d in gpus() {
        let n = 136 * MIB / 4 + 3;
        let ones = Tensor::ones(&[n], DType::F32, &d).unwrap();
        assert_eq!(
            ones.to_vec::<f32>().unwrap(),
            vec![1.0; n],
            "136 MiB ones on {d}"
        );
        let sevens = Tensor::full(&[n], -7.0, DType::I32, &d).unwrap();
        let v = sevens.to_vec::<i32>().unwrap();
        assert!(
            v.len() == n && v.iter().all(|&x| x == -7),
            "136 MiB full i32 on {d}"
        );
        // f16 with an odd count: the last block ends mid-word.
        let m = 2 * n + 1;
        let halves = Tensor::full(&[m], 0.5, DType::F16, &d).unwrap();
        let h = halves
            .narrow(0, m - 3, 3)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert_eq!(h.to_vec::<f32>().unwrap(), vec![0.5; 3], "f16 tail on {d}");
        // arange: the same values as the CPU's formula, across the block boundaries.
        let r = Tensor::arange(0.0, n as f32 * 0.5, 0.5, &d).unwrap();
        let cpu = Tensor::arange(0.0, n as f32 * 0.5, 0.5, &wgtensor::Device::cpu()).unwrap();
        assert_eq!(r.shape(), cpu.shape());
        let (got, want) = (r.to_vec::<f32>().unwrap(), cpu.to_vec::<f32>().unwrap());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(&got) == bits(&want), "136 MiB arange on {d}");
    }
}

#[test]
fn argmax_softmax_and_sum_over_dim0_past_one_binding() {
    for d in gpus() {
        let n = 136 * MIB / 4;
        let cols = 1024;
        let mut a = ramp(n, 0.001);
        // A unique maximum in the last block and a unique minimum in the first.
        let (imax, imin) = (n - 1000, 17);
        a[imax] = 1e6;
        a[imin] = -1e6;
        let flat = Tensor::from_vec(a.clone(), &[n], &d).unwrap();
        assert_eq!(
            flat.argmax_all().unwrap().to_scalar::<u32>().unwrap(),
            imax as u32,
            "{d}"
        );
        assert_eq!(
            flat.argmin_all().unwrap().to_scalar::<u32>().unwrap(),
            imin as u32,
            "{d}"
        );
        let t = flat.reshape(&[n / cols, cols]).unwrap();
        // softmax over the last dim, rows checked at both ends.
        let s = t.softmax(-1).unwrap();
        for r in [0usize, n / cols - 1] {
            let got = s.narrow(0, r, 1).unwrap().to_vec::<f32>().unwrap();
            let row = &a[r * cols..(r + 1) * cols];
            let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let z: f32 = row.iter().map(|x| (x - m).exp()).sum();
            for (g, x) in got.iter().zip(row) {
                let w = (x - m).exp() / z;
                assert!(
                    (g - w).abs() <= 1e-6 + 1e-4 * w,
                    "{d} softmax row {r}: {g} vs {w}"
                );
            }
        }
        // sum over dim 0 (blocks of rows, then the partials), checked against f64.
        let s0 = t.sum(0, false).unwrap().to_vec::<f32>().unwrap();
        for c in [0usize, 1, cols - 1] {
            let want: f64 = (0..n / cols).map(|r| a[r * cols + c] as f64).sum();
            assert!(
                (s0[c] as f64 - want).abs() <= 1e-3 * want.abs().max(1e3),
                "{d} sum(0)[{c}]"
            );
        }
    }
}

#[test]
fn cat_along_dim0_past_one_binding() {
    for d in gpus() {
        let cols = 4096;
        let (ra, rb) = (6400usize, 2304usize); // 100 MiB + 36 MiB of f32
        let a = ramp(ra * cols, 0.5);
        let b = ramp((rb + 3) * cols, -0.25);
        let ta = Tensor::from_vec(a.clone(), &[ra, cols], &d).unwrap();
        // A packed view that starts 3 rows into its buffer.
        let tb = Tensor::from_vec(b.clone(), &[rb + 3, cols], &d)
            .unwrap()
            .narrow(0, 3, rb)
            .unwrap();
        let c = Tensor::cat(&[&ta, &tb], 0).unwrap();
        assert_eq!(c.shape(), &[ra + rb, cols]);
        let head = c.narrow(0, ra - 1, 2).unwrap().to_vec::<f32>().unwrap();
        let mut want = a[(ra - 1) * cols..].to_vec();
        want.extend_from_slice(&b[3 * cols..4 * cols]);
        assert_eq!(head, want, "cat seam on {d}");
        let tail = c
            .narrow(0, ra + rb - 1, 1)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(tail, b[(rb + 2) * cols..].to_vec(), "cat tail on {d}");
    }
}

/// A dense weight past one binding used as a model uses it (item 9 of the pretrained-model
/// issue): a 32,000 x 1,100 f32 output matrix (134 MiB, past the 128 MiB many adapters bind)
/// multiplies activations as `x @ W.t()` for one row (decode) and for several (prefill), and
/// its rows are gathered (an embedding lookup), all against the CPU.
#[test]
fn output_matrix_past_one_binding_as_x_times_w_transposed() {
    let (rows, cols) = (32_000, 1_100);
    assert!(rows * cols * 4 > 128 * MIB);
    let cpu_w = Tensor::from_vec(
        ramp(rows * cols, 1.0 / 8192.0),
        &[rows, cols],
        &wgtensor::Device::cpu(),
    )
    .unwrap();
    for d in gpus() {
        let w = cpu_w.to(&d).unwrap();
        for n in [1, 3] {
            let x = Tensor::from_vec(ramp(n * cols, 1.0 / 512.0), &[n, cols], &d).unwrap();
            let got = x.matmul(&w.t().unwrap()).unwrap();
            assert_eq!(got.shape(), &[n, rows], "x @ W.t() shape on {d}");
            let want = x.cpu().unwrap().matmul(&cpu_w.t().unwrap()).unwrap();
            assert_close(
                &got.to_vec::<f32>().unwrap(),
                &want.to_vec::<f32>().unwrap(),
                1e-3,
                1e-3,
                &format!("[{n}, {cols}] @ W.t() on {d}"),
            );
        }
        // The embedding lookup of a table past one binding: one narrowed row per id, joined.
        let ids = [0usize, 17, 31_999, 20_000];
        let pick = |t: &Tensor| {
            let rows: Vec<Tensor> = ids.iter().map(|&i| t.narrow(0, i, 1).unwrap()).collect();
            Tensor::cat(&rows.iter().collect::<Vec<_>>(), 0).unwrap()
        };
        let got = pick(&w).to_vec::<f32>().unwrap();
        assert_eq!(
            got,
            pick(&cpu_w).to_vec::<f32>().unwrap(),
            "rows of a 134 MiB table on {d}"
        );
    }
}
