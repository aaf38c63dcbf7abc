//! Ids on the device: gather, scatter_add and index_add against host references on every
//! device, bit-identical sums of repeated ids (no float atomics), sorts past one workgroup,
//! out-of-range ids surfacing at the next synchronizing call with zeros in the rows they
//! touched, and no host crossing until the result is read.

use crate::common;

use common::devices;
use wgtensor::{transfer_stats, DType, Device, Error, Tensor};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 37.0 - 13.0)
        .collect()
}

/// `index_add` on host data: rows summed in id order, then added to the base (the
/// library's documented order).
fn index_add_ref(base: &[f32], r: usize, ids: &[u32], src: &[f32]) -> Vec<f32> {
    let mut out = base.to_vec();
    let rows = base.len() / r;
    for row in 0..rows {
        let mut acc = vec![0f32; r];
        for (k, _) in ids
            .iter()
            .enumerate()
            .filter(|&(_, &id)| id as usize == row)
        {
            for c in 0..r {
                acc[c] += src[k * r + c];
            }
        }
        for c in 0..r {
            out[row * r + c] += acc[c];
        }
    }
    out
}

#[test]
fn index_add_matches_the_reference_bit_for_bit_past_one_sort_block() {
    let _serial = common::serial();
    // 1 id, a block's worth, and 3,000 ids (4,096 sorted pairs: global sort stages).
    for device in devices() {
        for (n, rows, r) in [(1usize, 3usize, 2usize), (511, 7, 3), (3000, 50, 5)] {
            let ids: Vec<u32> = (0..n).map(|i| ((i * 7919 + i / 3) % rows) as u32).collect();
            let base = values(rows * r, 1);
            let src = values(n * r, 2);
            let expect = index_add_ref(&base, r, &ids, &src);
            let t = Tensor::from_vec(base.clone(), &[rows, r], &device).unwrap();
            let i = Tensor::from_vec(ids.clone(), &[n], &device).unwrap();
            let s = Tensor::from_vec(src.clone(), &[n, r], &device).unwrap();
            let got = t.index_add(0, &i, &s).unwrap().to_vec::<f32>().unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&expect), "{device} n={n}");
        }
    }
}

#[test]
fn index_add_along_a_middle_dim_and_with_i32_ids() {
    let _serial = common::serial();
    for device in devices() {
        let base = values(2 * 4 * 3, 3);
        let t = Tensor::from_vec(base.clone(), &[2, 4, 3], &device).unwrap();
        let ids = Tensor::from_vec(vec![3i32, 0, 3], &[3], &device).unwrap();
        let src = values(2 * 3 * 3, 4);
        let s = Tensor::from_vec(src.clone(), &[2, 3, 3], &device).unwrap();
        let got = t.index_add(1, &ids, &s).unwrap();
        assert_eq!(got.shape(), &[2, 4, 3]);
        let got = got.to_vec::<f32>().unwrap();
        let mut expect = base.clone();
        for o in 0..2 {
            for (k, id) in [3usize, 0, 3].into_iter().enumerate() {
                for c in 0..3 {
                    expect[(o * 4 + id) * 3 + c] += src[(o * 3 + k) * 3 + c];
                }
            }
        }
        for (g, e) in got.iter().zip(&expect) {
            assert!(
                (g - e).abs() <= 1e-5 * e.abs().max(1.0),
                "{device}: {got:?} vs {expect:?}"
            );
        }
    }
}

#[test]
fn gather_and_scatter_add_match_the_reference_on_every_device() {
    let _serial = common::serial();
    for device in devices() {
        let (rows, cols) = (5usize, 4usize);
        let x = values(rows * cols, 5);
        let t = Tensor::from_vec(x.clone(), &[rows, cols], &device).unwrap();
        // Index [3, 4] along dim 0 (fewer rows than t), and a transposed (strided) view of t.
        let idx: Vec<u32> = (0..12).map(|i| ((i * 3 + 1) % rows) as u32).collect();
        let it = Tensor::from_vec(idx.clone(), &[3, 4], &device).unwrap();
        let got = t.gather(0, &it).unwrap().to_vec::<f32>().unwrap();
        let expect: Vec<f32> = (0..12).map(|p| x[idx[p] as usize * cols + p % 4]).collect();
        assert_eq!(got, expect, "{device}: gather dim 0");
        let tt = t.transpose(0, 1).unwrap(); // [4, 5], strided
        let idx1: Vec<u32> = (0..8).map(|i| (i % rows) as u32).collect();
        let i1 = Tensor::from_vec(idx1.clone(), &[4, 2], &device).unwrap();
        let got = tt.gather(1, &i1).unwrap().to_vec::<f32>().unwrap();
        let expect: Vec<f32> = (0..8).map(|p| x[idx1[p] as usize * cols + p / 2]).collect();
        assert_eq!(got, expect, "{device}: gather dim 1 of a strided view");
        // scatter_add of src [3, 4] (larger src [3, 5] narrowed) into zeros [5, 4].
        let src = values(15, 6);
        let s = Tensor::from_vec(src.clone(), &[3, 5], &device).unwrap();
        let z = Tensor::zeros(&[rows, cols], DType::F32, &device).unwrap();
        let got = z.scatter_add(0, &it, &s).unwrap().to_vec::<f32>().unwrap();
        let mut expect = vec![0f32; rows * cols];
        let mut acc = vec![vec![0f32; 0]; rows * cols];
        for p in 0..12 {
            acc[idx[p] as usize * cols + p % 4].push(src[(p / 4) * 5 + p % 4]);
        }
        for (e, a) in expect.iter_mut().zip(&acc) {
            *e += a.iter().fold(0f32, |s, v| s + v);
        }
        assert_eq!(got, expect, "{device}: scatter_add");
    }
}

#[test]
fn gather_scatter_and_index_add_gradients_match_the_cpu() {
    let _serial = common::serial();
    let cpu = Device::cpu();
    let run = |device: &Device| {
        let x = Tensor::from_vec(values(12, 7), &[4, 3], device)
            .unwrap()
            .requires_grad_(true);
        let idx = Tensor::from_vec(vec![3u32, 0, 3, 1, 1, 1], &[2, 3], device).unwrap();
        let g = x.gather(0, &idx).unwrap();
        let ids = Tensor::from_vec(vec![2u32, 2, 0], &[3], device).unwrap();
        let e = x.index_select(0, &ids).unwrap();
        let w = Tensor::from_vec(values(9, 8), &[3, 3], device).unwrap();
        let loss = g
            .mul(&g)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&e.mul(&w).unwrap().sum_all().unwrap())
            .unwrap();
        loss.backward().unwrap();
        x.grad().unwrap().to_vec::<f32>().unwrap()
    };
    let expect = run(&cpu);
    // d/dx of sum(gather^2) = 2 x at each gathered place (repeats add); of sum(sel * w): rows.
    let x = values(12, 7);
    let mut hand = vec![0f32; 12];
    for (p, id) in [3usize, 0, 3, 1, 1, 1].into_iter().enumerate() {
        hand[id * 3 + p % 3] += 2.0 * x[id * 3 + p % 3];
    }
    let w = values(9, 8);
    for (k, id) in [2usize, 2, 0].into_iter().enumerate() {
        for c in 0..3 {
            hand[id * 3 + c] += w[k * 3 + c];
        }
    }
    for (a, b) in expect.iter().zip(&hand) {
        assert!((a - b).abs() < 1e-4, "cpu {expect:?} vs hand {hand:?}");
    }
    for device in common::gpus() {
        let got = run(&device);
        for (a, b) in got.iter().zip(&expect) {
            assert!((a - b).abs() < 1e-4, "{device}: {got:?} vs {expect:?}");
        }
    }
}

#[test]
fn out_of_range_ids_surface_at_the_next_sync_and_poison_the_result() {
    let _serial = common::serial();
    for device in common::gpus() {
        let earlier = Tensor::from_vec(values(6, 9), &[3, 2], &device).unwrap();
        let table = Tensor::from_vec(values(6, 10), &[3, 2], &device).unwrap();
        let ids = Tensor::from_vec(vec![1u32, 7, 0], &[3], &device).unwrap();
        let before = transfer_stats(&device);
        // No readback at the call: the op is only recorded.
        let rows = table.index_select(0, &ids).unwrap();
        assert_eq!(
            transfer_stats(&device).downloads,
            before.downloads,
            "{device}"
        );
        match device.synchronize() {
            Err(Error::IndexOutOfRange { op, index, bound }) => {
                assert_eq!((op, index, bound), ("index_select", 7, 3), "{device}")
            }
            other => panic!("{device}: expected IndexOutOfRange, got {other:?}"),
        }
        // Reported once to synchronize; the rows themselves stay poisoned (their readback
        // fails, never Ok with zeros), and nothing else broke.
        assert!(
            matches!(
                rows.to_vec::<f32>(),
                Err(Error::IndexOutOfRange { index: 7, .. })
            ),
            "{device}"
        );
        assert_eq!(earlier.to_vec::<f32>().unwrap(), values(6, 9), "{device}");
        device.synchronize().unwrap();
        // scatter_add and index_add drop the bad contribution and report it.
        let z = Tensor::zeros(&[3], DType::F32, &device).unwrap();
        let idx = Tensor::from_vec(vec![0i32, -2], &[2], &device).unwrap();
        let src = Tensor::from_vec(vec![1f32, 5.0], &[2], &device).unwrap();
        let out = z.scatter_add(0, &idx, &src).unwrap();
        match out.to_vec::<f32>() {
            Err(Error::IndexOutOfRange { op, index, bound }) => {
                assert_eq!((op, index, bound), ("scatter_add", -2, 3), "{device}")
            }
            other => panic!("{device}: expected IndexOutOfRange, got {other:?}"),
        }
        // Every later readback of the poisoned result fails too.
        assert!(
            matches!(
                out.to_vec::<f32>(),
                Err(Error::IndexOutOfRange { index: -2, .. })
            ),
            "{device}"
        );
        device.synchronize().unwrap();
    }
}
