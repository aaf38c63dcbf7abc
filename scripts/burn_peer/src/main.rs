// burn-wgpu peer: conv2d 3x3, 32 -> 32 channels, 8 images 32x32, padding 1, forward,
// timed like wgtensor's benches/models.rs (2 warm-up rounds, median of 5; a round ends when
// the device has finished and one element has been read back).
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Tensor};
use std::time::Instant;

fn main() {
    let dev = Device::default();
    let x = Tensor::<4>::random([8, 32, 32, 32], Distribution::Normal(0.0, 1.0), &dev);
    let w = Tensor::<4>::random([32, 32, 3, 3], Distribution::Normal(0.0, 0.05), &dev);
    let runs: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    for _ in 0..runs {
        let mut ms = Vec::new();
        for i in 0..7 {
            let t0 = Instant::now();
            let y = conv2d(x.clone(), w.clone(), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
            let v: Vec<f32> = y.flatten::<1>(0, 3).slice([0..1]).into_data().to_vec().unwrap();
            std::hint::black_box(v);
            if i >= 2 {
                ms.push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
        ms.sort_by(f64::total_cmp);
        println!("burn-wgpu conv2d_fwd: {:.3} ms (min {:.3}, max {:.3}, 5 rounds)", ms[2], ms[0], ms[4]);
    }
}
