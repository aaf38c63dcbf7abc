//! The two layers of the model examples, each next to the same math composed by hand from
//! wgtensor's own ops, in the same run, on the CPU and on every GPU adapter:
//!
//! - `conv2d_3x3_32ch_32x32`: a 3x3, padding 1, 32 -> 32 channel convolution of 8 images of
//!   32x32. Peer: im2col composed by hand (pad, then one `narrow` view per kernel tap, `stack`,
//!   `reshape`, matmul): nine strided copies where `conv2d` runs one cached-index gather.
//! - `attention_seq256_dim64`: causal self-attention of 4 heads x 256 positions x 64 dims.
//!   Peer: `matmul`, scale, `masked_fill`, `softmax`, `matmul` written out. `sdpa` is that same
//!   composition (no fused kernel yet), so the pair shows the wrapper costs nothing.
//!
//! Forward only; GPU timings wait for the device (`Device::synchronize`), readback excluded.
//! `cargo bench --bench models` (add `-- --quick` for a faster, noisier run).

use criterion::{criterion_group, Criterion};
use std::hint::black_box;
use std::time::Duration;
use wgtensor::{Conv2dOptions, DType, Device, PadMode, Tensor};

fn devices() -> Vec<Device> {
    let mut v = vec![Device::cpu()];
    v.extend(
        wgtensor::adapters()
            .iter()
            .filter_map(|a| a.names.first()?.parse().ok()),
    );
    v
}

fn settle(t: &Tensor) {
    t.device().synchronize().unwrap();
    black_box(t);
}

/// im2col by hand: `[n, c, h, w]` -> `[n, c * 9, h * w]` for a 3x3 kernel, padding 1.
fn im2col_by_hand(x: &Tensor) -> Tensor {
    let &[n, c, h, w] = x.shape() else {
        unreachable!()
    };
    let p = x.pad(&[1, 1, 1, 1], PadMode::Constant(0.0)).unwrap();
    let mut taps = Vec::with_capacity(9);
    for i in 0..3 {
        for j in 0..3 {
            taps.push(p.narrow(2, i, h).unwrap().narrow(3, j, w).unwrap());
        }
    }
    let refs: Vec<&Tensor> = taps.iter().collect();
    // [n, c, 9, h, w]: channel-major rows, as the weight [o, c, 3, 3] flattens.
    Tensor::stack(&refs, 2)
        .unwrap()
        .reshape(&[n, c * 9, h * w])
        .unwrap()
}

fn conv(c: &mut Criterion) {
    let mut g = c.benchmark_group("conv2d_3x3_32ch_32x32");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for dev in devices() {
        let x = Tensor::randn(&[8, 32, 32, 32], &dev).unwrap();
        let w = Tensor::randn(&[32, 32, 3, 3], &dev).unwrap();
        let o = Conv2dOptions::default().padding(1);
        g.bench_function(format!("im2col_matmul_by_hand/{dev}"), |b| {
            b.iter(|| {
                let cols = im2col_by_hand(&x);
                let y = w.reshape(&[32, 288]).unwrap().matmul(&cols).unwrap();
                settle(&y.reshape(&[8, 32, 32, 32]).unwrap())
            })
        });
        g.bench_function(format!("wgtensor_conv2d/{dev}"), |b| {
            b.iter(|| settle(&x.conv2d(&w, None, &o).unwrap()))
        });
    }
    g.finish();
}

fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention_seq256_dim64");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for dev in devices() {
        let q = Tensor::randn(&[4, 256, 64], &dev).unwrap();
        let k = Tensor::randn(&[4, 256, 64], &dev).unwrap();
        let v = Tensor::randn(&[4, 256, 64], &dev).unwrap();
        let future = Tensor::ones(&[256, 256], DType::F32, &dev)
            .unwrap()
            .triu(1)
            .unwrap()
            .gt_scalar(0.0)
            .unwrap();
        g.bench_function(format!("matmul_softmax_matmul/{dev}"), |b| {
            b.iter(|| {
                let s = q
                    .matmul(&k.transpose(-2, -1).unwrap())
                    .unwrap()
                    .mul_scalar(0.125)
                    .unwrap();
                let p = s
                    .masked_fill(&future, f32::NEG_INFINITY)
                    .unwrap()
                    .softmax(-1)
                    .unwrap();
                settle(&p.matmul(&v).unwrap())
            })
        });
        g.bench_function(format!("wgtensor_sdpa/{dev}"), |b| {
            b.iter(|| {
                settle(
                    &Tensor::scaled_dot_product_attention(&q, &k, &v, None, true, 0.0, None)
                        .unwrap(),
                )
            })
        });
    }
    g.finish();
}

criterion_group!(benches, conv, attention);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
