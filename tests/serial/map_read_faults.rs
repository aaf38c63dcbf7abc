//! FAULTS.md row 31: GPU work inside a `map_read` closure. On a unified-memory adapter
//! (llvmpipe is one) `map_read` maps the tensor's own buffer, and nothing can be submitted until
//! the closure returns: a readback or a flushed op inside the closure is an immediate
//! `InvalidArgument` naming `map_read`, never a wait for the device timeout. Elsewhere (staging
//! copies) it simply works. Either way the device stays usable. In the `serial` binary: it sets
//! the shared devices' timeout to ten minutes, so a wait for the timeout would show as a hung
//! test, and no other test runs meanwhile.

use crate::common;

use common::{data, devices};
use std::time::Duration;
use wgtensor::{transfer_stats, Error, Tensor};

#[test]
fn gpu_work_inside_a_map_read_closure_errors_at_once_or_completes() {
    let _serial = common::serial();
    for device in devices() {
        device.set_timeout(Duration::from_secs(600));
        let a = Tensor::from_vec(data(8, 1, 1.0), &[8], &device).unwrap();
        let b = Tensor::from_vec(data(8, 2, 1.0), &[8], &device).unwrap();
        let direct = transfer_stats(&device).direct_downloads;
        let (seen, inner) = a
            .map_read(|v: &[f32]| (v.to_vec(), b.to_vec::<f32>()))
            .unwrap();
        assert_eq!(seen, data(8, 1, 1.0), "{device}");
        // Whether the outer map_read mapped the tensor's own buffer (unified memory).
        let mapped_in_place = transfer_stats(&device).direct_downloads > direct;
        match inner {
            Ok(v) => {
                assert!(!mapped_in_place, "{device}: a readback ran under a mapping");
                assert_eq!(v, data(8, 2, 1.0), "{device}");
            }
            Err(Error::InvalidArgument { op, message }) => {
                assert!(mapped_in_place, "{device}: {message}");
                assert_eq!(op, "to_vec", "{device}");
                assert!(message.contains("map_read"), "{device}: {message}");
            }
            Err(e) => panic!("{device}: expected Ok or InvalidArgument, got {e:?}"),
        }
        // An op and its readback inside the closure: the same.
        let inner = a
            .map_read(|_: &[f32]| a.add(&b).and_then(|c| c.to_vec::<f32>()))
            .unwrap();
        match inner {
            Ok(v) => assert_eq!(v.len(), 8, "{device}"),
            Err(Error::InvalidArgument { message, .. }) => {
                assert!(message.contains("map_read"), "{device}: {message}")
            }
            Err(e) => panic!("{device}: expected Ok or InvalidArgument, got {e:?}"),
        }
        // The device is fine afterwards: both tensors, an op, a synchronize.
        assert_eq!(b.to_vec::<f32>().unwrap(), data(8, 2, 1.0), "{device}");
        let c = a.add(&b).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f32> = data(8, 1, 1.0)
            .iter()
            .zip(data(8, 2, 1.0))
            .map(|(x, y)| x + y)
            .collect();
        assert_eq!(c, want, "{device}");
        device.synchronize().unwrap();
        device.set_timeout(Duration::from_secs(120));
    }
}
