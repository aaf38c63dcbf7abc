//! The caching allocator and memory statistics (PyTorch's `torch.cuda.memory_*`), transfer
//! statistics, batched and asynchronous readbacks, and the soak test (FAULTS row 25).
//!
//! Memory counters and the buffer cache are per device and shared by every test in the process,
//! so every test of the `serial` binary holds `common::serial()` and they run one at a time
//! (the tests here hold `STATS` too, as they did in a binary of their own).

use crate::common;
use common::{devices, gpus, values};
use std::sync::Mutex;
use wgtensor::{DType, Device, Tensor};

static STATS: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    STATS.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn allocation_is_counted_exactly_and_given_back() {
    let _serial = common::serial();
    let _g = lock();
    for d in devices() {
        let before = wgtensor::memory_allocated(&d);
        let t = Tensor::zeros(&[256], DType::F32, &d).unwrap();
        assert_eq!(
            wgtensor::memory_allocated(&d),
            before + 1024,
            "256 f32 on {d}"
        );
        assert!(wgtensor::max_memory_allocated(&d) >= before + 1024);
        assert!(
            wgtensor::memory_reserved(&d) >= wgtensor::memory_allocated(&d),
            "{d}"
        );
        let h = Tensor::zeros(&[256], DType::F16, &d).unwrap();
        assert_eq!(
            wgtensor::memory_allocated(&d),
            before + 1024 + 512,
            "256 f16 on {d}: half the bytes"
        );
        drop(t);
        drop(h);
        assert_eq!(
            wgtensor::memory_allocated(&d),
            before,
            "dropping gives the bytes back on {d}"
        );
        // A view shares storage: no new bytes.
        let t = Tensor::zeros(&[16, 16], DType::F32, &d).unwrap();
        let v = t.transpose(0, 1).unwrap();
        assert_eq!(wgtensor::memory_allocated(&d), before + 1024);
        drop((t, v));
        wgtensor::reset_peak_memory_stats(&d);
        assert_eq!(
            wgtensor::max_memory_allocated(&d),
            wgtensor::memory_allocated(&d)
        );
        let summary = wgtensor::memory_summary(&d);
        assert!(
            summary.contains("allocated") && summary.contains(&d.to_string()),
            "{summary}"
        );
    }
}

#[test]
fn cached_buffers_are_reused_and_released() {
    let _serial = common::serial();
    let _g = lock();
    for d in gpus() {
        wgtensor::empty_cache(&d);
        d.synchronize().unwrap();
        let base = wgtensor::memory_reserved(&d);
        let t = Tensor::full(&[1000], 7.0, DType::F32, &d).unwrap();
        let with_one = wgtensor::memory_reserved(&d);
        assert!(with_one > base, "a new tensor reserves memory on {d}");
        drop(t);
        d.synchronize().unwrap();
        // The freed buffer stays cached: reserved unchanged.
        assert_eq!(
            wgtensor::memory_reserved(&d),
            with_one,
            "freed buffers are cached on {d}"
        );
        // Reusing it for zeros must not leak the old contents.
        let z = Tensor::zeros(&[1000], DType::F32, &d).unwrap();
        assert_eq!(
            wgtensor::memory_reserved(&d),
            with_one,
            "the cached buffer is reused on {d}"
        );
        assert_eq!(
            values(&z),
            vec![0.0; 1000],
            "a reused buffer is cleared for zeros on {d}"
        );
        drop(z);
        wgtensor::empty_cache(&d);
        assert_eq!(
            wgtensor::memory_reserved(&d),
            base,
            "empty_cache releases cached buffers on {d}"
        );
    }
}

#[test]
fn soak_create_op_drop_keeps_reserved_memory_flat() {
    let _serial = common::serial();
    let _g = lock();
    for d in devices() {
        let run = |iters: usize| {
            for i in 0..iters {
                let a = Tensor::full(&[64, 64], i as f64, DType::F32, &d).unwrap();
                // The sum consumes the fused mul + relu, so every iteration runs kernels (an
                // elementwise result that is dropped unread never runs).
                let b = (&a * 2.0).unwrap().relu().unwrap().sum_all().unwrap();
                drop((a, b));
            }
            d.synchronize().unwrap();
        };
        run(100); // warm the cache
        let (reserved, allocated) = (
            wgtensor::memory_reserved(&d),
            wgtensor::memory_allocated(&d),
        );
        let iters = 10_000;
        run(iters);
        assert_eq!(
            wgtensor::memory_allocated(&d),
            allocated,
            "allocated returns to baseline on {d}"
        );
        assert_eq!(
            wgtensor::memory_reserved(&d),
            reserved,
            "reserved stays flat over {iters} iterations on {d}"
        );
    }
}

#[test]
fn f16_tensors_take_half_the_memory_and_transfer_bytes_of_f32() {
    let _serial = common::serial();
    let _g = lock();
    let n = 4096u64;
    for d in common::devices() {
        let f = Tensor::ones(&[n as usize], DType::F32, &d).unwrap();
        let before = wgtensor::memory_allocated(&d);
        // Elementwise results on a GPU are fused lazily: synchronize runs them (and allocates).
        let h = f.to_dtype(DType::F16).unwrap();
        d.synchronize().unwrap();
        let h_bytes = wgtensor::memory_allocated(&d) - before;
        let before = wgtensor::memory_allocated(&d);
        let f2 = h.to_dtype(DType::F32).unwrap();
        d.synchronize().unwrap();
        let f_bytes = wgtensor::memory_allocated(&d) - before;
        assert_eq!(
            (h_bytes, f_bytes),
            (2 * n, 4 * n),
            "f16 vs f32 memory on {d}"
        );
        drop((f2, f));
        if d.is_gpu() {
            wgtensor::reset_transfer_stats(&d);
            let _ = h.to_vec::<half::f16>().unwrap();
            let _ = Tensor::ones(&[n as usize], DType::F16, &Device::cpu())
                .unwrap()
                .to(&d)
                .unwrap();
            let s = wgtensor::transfer_stats(&d);
            assert_eq!((s.download_bytes, s.upload_bytes), (2 * n, 2 * n), "{d}");
        }
    }
}

#[test]
fn transfer_stats_count_bytes_each_way() {
    let _serial = common::serial();
    let _g = lock();
    for d in gpus() {
        wgtensor::reset_transfer_stats(&d);
        let host = Tensor::ones(&[256], DType::F32, &Device::cpu()).unwrap();
        let g = host.to(&d).unwrap();
        let h = Tensor::ones(&[256], DType::F16, &Device::cpu())
            .unwrap()
            .to(&d)
            .unwrap();
        let s = wgtensor::transfer_stats(&d);
        assert_eq!(
            (s.uploads, s.upload_bytes),
            (2, 1024 + 512),
            "f16 moves half the bytes of f32 on {d}"
        );
        let _ = g.to_vec::<f32>().unwrap();
        let _ = h.cpu().unwrap();
        let s = wgtensor::transfer_stats(&d);
        assert_eq!((s.downloads, s.download_bytes), (2, 1024 + 512), "{d}");
        // One read_all of three tensors: three downloads, counted once each.
        let parts = wgtensor::read_all(&[&g, &h, &g]).unwrap();
        assert_eq!(parts[2].to_vec::<f32>().unwrap(), vec![1.0; 256]);
        assert_eq!(wgtensor::transfer_stats(&d).downloads, 5);
        wgtensor::reset_transfer_stats(&d);
        assert_eq!(
            wgtensor::transfer_stats(&d),
            wgtensor::TransferStats::default()
        );
    }
    assert_eq!(
        wgtensor::transfer_stats(&Device::cpu()),
        wgtensor::TransferStats::default()
    );
}

#[test]
fn round_trips_of_the_same_data_are_noticed() {
    let _serial = common::serial();
    let _g = lock();
    for d in gpus() {
        wgtensor::warn_on_transfer_churn(true);
        wgtensor::reset_transfer_stats(&d);
        let mut t = Tensor::arange(0.0, 100.0, 1.0, &d).unwrap();
        for _ in 0..10 {
            // The seeds' pitfall: bring it back, push it again, every iteration.
            let host = t.to_vec::<f32>().unwrap();
            t = Tensor::from_vec(host, &[100], &d).unwrap();
        }
        wgtensor::warn_on_transfer_churn(false);
        assert!(
            wgtensor::transfer_stats(&d).round_trips >= 9,
            "{:?}",
            wgtensor::transfer_stats(&d)
        );
    }
}

#[test]
fn read_all_matches_single_reads_across_devices_and_views() {
    let _serial = common::serial();
    let _g = lock();
    for d in devices() {
        let a = Tensor::arange(0.0, 12.0, 1.0, &d)
            .unwrap()
            .reshape(&[3, 4])
            .unwrap();
        let b = a.t().unwrap(); // a strided view
        let c = Tensor::from_vec(vec![1u8, 2, 3], &[3], &d).unwrap(); // odd byte count
        let e = a.narrow(0, 0, 0).unwrap(); // empty
        let cpu = Tensor::ones(&[2], DType::F32, &Device::cpu()).unwrap();
        let all = wgtensor::read_all(&[&a, &b, &c, &e, &cpu]).unwrap();
        assert!(all.iter().all(|t| t.is_cpu()));
        assert_eq!(values(&all[0]), values(&a));
        assert_eq!(values(&all[1]), values(&b), "strided view on {d}");
        assert_eq!(all[2].to_vec::<u8>().unwrap(), vec![1, 2, 3]);
        assert_eq!(all[3].shape(), &[0, 4]);
        assert_eq!(values(&all[4]), vec![1.0, 1.0]);
    }
}

#[test]
fn async_transfers_resolve_on_any_executor() {
    let _serial = common::serial();
    let _g = lock();
    for d in devices() {
        let x = Tensor::arange(0.0, 1000.0, 1.0, &Device::cpu()).unwrap();
        let pending = x.to_async(&d);
        // The host is free here; await only when the data is needed.
        let on_device = pollster::block_on(pending).unwrap();
        assert_eq!(on_device.device(), &d);
        let y = on_device.mul_scalar(3.0).unwrap();
        let v = pollster::block_on(y.to_vec_async::<f32>()).unwrap();
        assert_eq!(
            v,
            (0..1000).map(|i| i as f32 * 3.0).collect::<Vec<_>>(),
            "{d}"
        );
        assert!(
            pollster::block_on(y.to_vec_async::<i32>()).is_err(),
            "dtype checked asynchronously too"
        );
    }
}

#[test]
fn concurrent_readbacks_of_one_tensor_agree() {
    let _serial = common::serial();
    let _g = lock();
    // FAULTS row 20: 8 threads x 100 readbacks of the same tensor.
    for d in devices() {
        let t = Tensor::arange(0.0, 4096.0, 0.5, &d).unwrap();
        let want = values(&t);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..100 {
                        assert_eq!(values(&t), want, "concurrent readback on {d}");
                    }
                });
            }
        });
    }
}

#[test]
fn ops_from_several_threads_at_once() {
    let _serial = common::serial();
    let _g = lock();
    // FAULTS row 21: tensors sent between threads, ops recorded from several threads.
    for d in devices() {
        let shared = Tensor::arange(0.0, 1000.0, 1.0, &d).unwrap();
        let results: Vec<(usize, Vec<f32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|k| {
                    let t = shared.clone();
                    s.spawn(move || {
                        let mut acc = t.clone();
                        for _ in 0..25 {
                            acc = (&acc + &t).unwrap();
                        }
                        (k, values(&acc))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (k, v) in results {
            assert_eq!(
                v,
                (0..1000).map(|i| i as f32 * 26.0).collect::<Vec<_>>(),
                "thread {k} on {d}"
            );
        }
    }
}

#[test]
fn readbacks_while_other_threads_compute_on_the_same_buffer() {
    let _serial = common::serial();
    let _g = lock();
    // On unified memory a readback maps the tensor buffer itself; threads recording ops that
    // read that buffer at the same moment must neither fail at submit nor see torn data.
    for d in devices() {
        let shared = Tensor::arange(0.0, 70_000.0, 1.0, &d).unwrap();
        let want = values(&shared);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20 {
                        assert_eq!(values(&shared), want, "readback on {d}");
                    }
                });
            }
            for k in 0..2 {
                let t = shared.clone();
                let want = &want;
                let d = &d;
                s.spawn(move || {
                    for i in 0..10 {
                        let y = t.add_scalar((k * 10 + i) as f32).unwrap();
                        let got = values(&y);
                        let off = (k * 10 + i) as f32;
                        assert!(
                            got.iter().zip(want).all(|(g, w)| *g == w + off),
                            "op {i} of thread {k} on {d}"
                        );
                    }
                });
            }
        });
    }
}

#[test]
fn unified_adapters_read_back_without_a_staging_copy() {
    let _serial = common::serial();
    let _g = lock();
    for d in gpus() {
        let unified = wgtensor::adapters()
            .iter()
            .any(|a| a.names.contains(&d.to_string()) && a.unified_memory);
        let t = Tensor::arange(0.0, 1000.0, 1.0, &d).unwrap();
        d.synchronize().unwrap();
        wgtensor::reset_transfer_stats(&d);
        let v = t.narrow(0, 3, 5).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v, vec![3.0, 4.0, 5.0, 6.0, 7.0], "odd offset view on {d}");
        let stats = wgtensor::transfer_stats(&d);
        assert_eq!(stats.downloads, 1, "{d}");
        assert_eq!(stats.download_bytes, 20, "{d}");
        let want = if unified { 1 } else { 0 };
        assert_eq!(
            stats.direct_downloads, want,
            "{d} (unified memory: {unified})"
        );
    }
}

#[test]
fn map_read_sees_what_to_vec_returns_without_a_copy() {
    let _serial = common::serial();
    let _g = lock();
    for d in devices() {
        let x = Tensor::from_vec(common::data(1000, 8, 3.0), &[10, 100], &d).unwrap();
        let cases = [
            ("packed", x.clone()),
            ("narrowed", x.narrow(1, 3, 50).unwrap()),
            ("transposed", x.t().unwrap()),
            ("empty", x.narrow(0, 0, 0).unwrap()),
        ];
        for (what, t) in cases {
            let want = t.to_vec::<f32>().unwrap();
            let got = t.map_read(|v: &[f32]| v.to_vec()).unwrap();
            assert_eq!(got, want, "{what} on {d}");
        }
        // Other dtypes, including an odd offset into packed f16 words.
        let h = x.to_dtype(DType::F16).unwrap().flatten().unwrap();
        let h = h.narrow(0, 1, 7).unwrap();
        assert_eq!(
            h.map_read(|v: &[wgtensor::f16]| v.to_vec()).unwrap(),
            h.to_vec::<wgtensor::f16>().unwrap(),
            "f16 on {d}"
        );
        let m = x.gt_scalar(0.0).unwrap();
        assert_eq!(
            m.map_read(|v: &[u8]| v.to_vec()).unwrap(),
            m.to_vec::<u8>().unwrap()
        );
        assert!(matches!(
            x.map_read(|v: &[i32]| v.len()),
            Err(wgtensor::Error::DTypeMismatch { op: "map_read", .. })
        ));
        if d.is_gpu() {
            wgtensor::reset_transfer_stats(&d);
            let n = x.map_read(|v: &[f32]| v.len()).unwrap();
            assert_eq!(n, 1000);
            let s = wgtensor::transfer_stats(&d);
            assert_eq!((s.downloads, s.download_bytes), (1, 4000), "{d}: {s:?}");
        }
    }
}
