//! Random numbers on the device: `manual_seed` gives the same `rand`, `randn`, `randint`,
//! `bernoulli` and dropout masks, bit for bit, on the CPU and every adapter (GL views
//! included); GPU draws upload nothing; a checkpointed Dropout replays its mask in backward.

use crate::common;

use common::{assert_close, devices, gl_views};
use std::sync::Mutex;
use wgtensor::nn::{Checkpoint, Dropout, Linear, Module, Sequential};
use wgtensor::{DType, Device, Tensor};

/// The generator is global: tests that seed it run one at a time.
fn lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|p| p.into_inner())
}

fn all_devices() -> Vec<Device> {
    let mut d = devices();
    d.extend(gl_views());
    d
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

struct Draws {
    rand: Vec<f32>,
    randn: Vec<f32>,
    randint: Vec<i32>,
    bernoulli: Vec<f32>,
    dropout: Vec<f32>,
}

fn draw(d: &Device) -> Draws {
    wgtensor::manual_seed(1234);
    let rand = Tensor::rand(&[1001], d).unwrap();
    let randn = Tensor::randn(&[257, 3], d).unwrap();
    let randint = Tensor::randint(-5, 9, &[300], d).unwrap();
    let p = Tensor::full(&[513], 0.3, DType::F32, d).unwrap();
    let bernoulli = p.bernoulli().unwrap();
    let x = Tensor::ones(&[64, 17], DType::F32, d).unwrap();
    let dropout = Dropout::new(0.4).unwrap().forward(&x).unwrap();
    Draws {
        rand: rand.to_vec().unwrap(),
        randn: randn.to_vec().unwrap(),
        randint: randint.to_vec().unwrap(),
        bernoulli: bernoulli.to_vec().unwrap(),
        dropout: dropout.to_vec().unwrap(),
    }
}

#[test]
fn a_seed_gives_the_same_numbers_on_every_device() {
    let _serial = common::serial();
    let _g = lock();
    let want = draw(&Device::cpu());
    // Sanity of the distributions on the reference draw.
    let mean: f32 = want.rand.iter().sum::<f32>() / want.rand.len() as f32;
    assert!((mean - 0.5).abs() < 0.05, "rand mean {mean}");
    assert!(want.rand.iter().all(|&u| (0.0..1.0).contains(&u)));
    let m: f32 = want.randn.iter().sum::<f32>() / want.randn.len() as f32;
    let var: f32 =
        want.randn.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / want.randn.len() as f32;
    assert!(
        m.abs() < 0.15 && (var - 1.0).abs() < 0.2,
        "randn mean {m} var {var}"
    );
    assert!(want.randint.iter().all(|v| (-5..9).contains(v)));
    assert!(want.randint.contains(&-5) && want.randint.contains(&8));
    let kept =
        want.dropout.iter().filter(|&&v| v != 0.0).count() as f32 / want.dropout.len() as f32;
    assert!((kept - 0.6).abs() < 0.06, "dropout keeps {kept}");
    assert!(want
        .dropout
        .iter()
        .all(|&v| v == 0.0 || (v - 1.0 / 0.6).abs() < 1e-6));
    for d in all_devices() {
        let got = draw(&d);
        assert_eq!(bits(&got.rand), bits(&want.rand), "rand on {d}");
        // Normals are drawn in integer fixed point: the same bits everywhere.
        assert_eq!(bits(&got.randn), bits(&want.randn), "randn on {d}");
        assert_eq!(got.randint, want.randint, "randint on {d}");
        assert_eq!(
            bits(&got.bernoulli),
            bits(&want.bernoulli),
            "bernoulli on {d}"
        );
        assert_eq!(
            bits(&got.dropout),
            bits(&want.dropout),
            "dropout mask on {d}"
        );
    }
}

#[test]
fn draws_continue_the_stream_and_upload_nothing() {
    let _serial = common::serial();
    let _g = lock();
    for d in all_devices() {
        wgtensor::manual_seed(7);
        let whole = Tensor::rand(&[300], &d).unwrap().to_vec::<f32>().unwrap();
        wgtensor::manual_seed(7);
        let a = Tensor::rand(&[100], &d).unwrap();
        let b = Tensor::rand(&[200], &d).unwrap();
        let parts = Tensor::cat(&[&a, &b], 0).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(
            bits(&parts),
            bits(&whole),
            "two draws continue one stream on {d}"
        );
        if d.is_gpu() {
            wgtensor::reset_transfer_stats(&d);
            let r = Tensor::randn(&[4096], &d).unwrap().mul_scalar(2.0).unwrap();
            d.synchronize().unwrap();
            assert_eq!(
                wgtensor::transfer_stats(&d).uploads,
                0,
                "randn uploads nothing on {d}"
            );
            drop(r);
        }
        // f16 activations drop too.
        let h = Tensor::ones(&[8, 8], DType::F16, &d).unwrap();
        let y = Dropout::new(0.5).unwrap().forward(&h).unwrap();
        assert_eq!(y.dtype(), DType::F16, "{d}");
    }
}

#[test]
fn checkpointed_dropout_replays_its_mask_in_backward() {
    let _serial = common::serial();
    let _g = lock();
    for d in all_devices() {
        let run = |checkpoint: bool, p: f32| -> Vec<f32> {
            wgtensor::manual_seed(99);
            let cpu = Device::cpu();
            let block = Sequential::new()
                .add(Linear::new(6, 6, true, &cpu).unwrap())
                .add(Dropout::new(p).unwrap())
                .add(Linear::new(6, 3, true, &cpu).unwrap());
            let mut model = if checkpoint {
                Sequential::new().add(Checkpoint::new(block))
            } else {
                Sequential::new().add(block)
            };
            model.to(&d).unwrap();
            let x = Tensor::randn(&[5, 6], &d).unwrap();
            // Draws between forward and backward must not change the replayed mask.
            let y = model.forward(&x).unwrap();
            let _other = Tensor::rand(&[10], &d).unwrap();
            y.sum_all().unwrap().backward().unwrap();
            let p = model.parameters();
            p[0].grad().unwrap().to_vec::<f32>().unwrap()
        };
        let plain = run(false, 0.5);
        let replayed = run(true, 0.5);
        // The masks matter: without dropout the gradients differ (so the equality below is not
        // vacuous).
        let without = run(false, 0.0);
        assert!(
            plain
                .iter()
                .zip(&without)
                .any(|(a, b)| (a - b).abs() > 1e-4),
            "dropout changed nothing on {d}"
        );
        assert_close(
            &replayed,
            &plain,
            1e-6,
            1e-6,
            &format!("checkpointed grads on {d}"),
        );
    }
}
