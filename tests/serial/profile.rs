//! `Device::profile`: per-kernel GPU time from timestamp queries, on every device. A profile
//! times every dispatch of its device, whichever thread makes it, and one profile of a device is
//! open at a time: in the `serial` binary, so no other test dispatches or profiles meanwhile.

use crate::common;

use common::{assert_close, data, devices, values};
use wgtensor::{Error, Tensor};

#[test]
fn profile_times_each_kernel_and_closes_on_error() {
    let _serial = common::serial();
    for dev in devices() {
        let a = Tensor::from_vec(data(64 * 64, 1, 1.0), &[64, 64], &dev).unwrap();
        let want = values(&a.matmul(&a).unwrap().softmax(-1).unwrap());
        let (out, p) = dev
            .profile(|| a.matmul(&a)?.softmax(-1)?.add_scalar(1.0))
            .unwrap();
        let got: Vec<f32> = values(&out).iter().map(|v| v - 1.0).collect();
        assert_close(
            &got,
            &want,
            1e-5,
            1e-6,
            &format!("results inside a profile on {dev}"),
        );
        if dev.is_cpu() {
            assert!(!p.timestamps && p.kernels.is_empty() && p.dispatches == 0);
        } else {
            assert!(p.dispatches >= 2, "{dev}: {} dispatches", p.dispatches);
        }
        if p.timestamps {
            assert_eq!(p.timed, p.dispatches, "{dev}: every dispatch timed");
            let calls: u64 = p.kernels.iter().map(|k| k.calls).sum();
            assert_eq!(calls, p.timed, "{dev}: calls add up");
            for op in ["matmul", "softmax"] {
                assert!(
                    p.kernels.iter().any(|k| k.op == op),
                    "{dev}: no {op} kernel in {:?}",
                    p.kernels
                );
            }
            // Sorted longest first; the whole is the sum.
            assert!(p.kernels.windows(2).all(|w| w[0].gpu_time >= w[1].gpu_time));
            assert_eq!(p.total(), p.kernels.iter().map(|k| k.gpu_time).sum());
            eprintln!("{dev}: {:?}", p.kernels);
        }
        // Profiles do not nest; an error inside closes the profile.
        let nested = dev.profile(|| dev.profile(|| Ok(())).map(|_| ()));
        if dev.is_gpu() && p.timestamps {
            assert!(
                matches!(nested, Err(Error::InvalidArgument { .. })),
                "{dev}: nested"
            );
        }
        let bad = dev.profile(|| a.matmul(&Tensor::zeros(&[3, 3], wgtensor::DType::F32, &dev)?));
        assert!(matches!(bad, Err(Error::ShapeMismatch { .. })), "{dev}");
        let (_, again) = dev.profile(|| a.add(&a)).unwrap();
        if again.timestamps {
            assert!(
                again.kernels.iter().any(|k| k.op == "add"),
                "{dev}: {:?}",
                again.kernels
            );
        }
    }
}
