//! FAULTS.md row 26: a kernel that finds a bad id poisons the data it wrote, not the thread
//! that launched it. Every readback path of that data (and of anything derived from it) fails
//! with `IndexOutOfRange`, on any thread, however many threads the process has used; an
//! unrelated op or thread stays `Ok`. On the CPU the op itself fails at once.

use crate::common;

use common::{data, devices, gpus};
use wgtensor::{Device, Error, Tensor};

/// A 3x2 table and a gather of rows `[1, 7, 0]` (7 is past the end).
fn bad_gather(device: &Device) -> wgtensor::Result<Tensor> {
    let table = Tensor::from_vec(data(6, 3, 1.0), &[3, 2], device)?;
    let ids = Tensor::from_vec(vec![1u32, 7, 0], &[3], device)?;
    table.index_select(0, &ids)
}

fn assert_bad<T: std::fmt::Debug>(what: &str, device: &Device, r: wgtensor::Result<T>) {
    match r {
        Err(Error::IndexOutOfRange { op, index, bound }) => {
            assert_eq!(
                (op, index, bound),
                ("index_select", 7, 3),
                "{device}: {what}"
            )
        }
        other => panic!("{device}: {what}: expected IndexOutOfRange, got {other:?}"),
    }
}

#[test]
fn every_readback_path_of_poisoned_data_fails() {
    for device in devices() {
        let sentinel = Tensor::from_vec(data(4, 5, 1.0), &[4], &device).unwrap();
        let rows = match bad_gather(&device) {
            // The CPU checks the ids eagerly: the op itself fails.
            r if device.is_cpu() => {
                assert_bad("index_select on the CPU", &device, r);
                continue;
            }
            r => r.unwrap(),
        };
        // Every path, and each of them again: the data stays poisoned.
        for _ in 0..2 {
            assert_bad("to_vec", &device, rows.to_vec::<f32>());
            assert_bad(
                "to_vec_async",
                &device,
                pollster::block_on(rows.to_vec_async::<f32>()),
            );
            assert_bad("map_read", &device, rows.map_read(|v: &[f32]| v.len()));
            assert_bad("read_all", &device, wgtensor::read_all(&[&sentinel, &rows]));
            assert_bad(".cpu()", &device, rows.cpu());
            assert_bad(".to(cpu)", &device, rows.to(&Device::cpu()));
            let view = rows.narrow(0, 0, 1).and_then(|r| r.narrow(1, 1, 1));
            assert_bad(
                "to_scalar of a view",
                &device,
                view.and_then(|x| x.to_scalar::<f32>()),
            );
        }
        // Reported to the readers above, so synchronize (another way to learn of it) is Ok,
        // and unrelated data reads back as it was.
        device.synchronize().unwrap();
        assert_eq!(
            sentinel.to_vec::<f32>().unwrap(),
            data(4, 5, 1.0),
            "{device}"
        );
    }
}

#[test]
fn data_derived_from_poisoned_data_fails_too() {
    for device in gpus() {
        let rows = bad_gather(&device).unwrap();
        let ones = Tensor::ones(&[3, 2], rows.dtype(), &device).unwrap();
        // Derived before the error is known: elementwise, a reduction, a copy of a view.
        let sum = rows.add(&ones).unwrap();
        let total = sum.sum(0, false).unwrap();
        let packed = rows.t().unwrap().contiguous().unwrap();
        assert_bad("gather then add", &device, sum.to_vec::<f32>());
        assert_bad("gather, add, sum", &device, total.to_vec::<f32>());
        assert_bad("a packed transpose", &device, packed.to_vec::<f32>());
        // Derived after it was reported: still poisoned.
        let later = rows.mul_scalar(2.0).unwrap();
        assert_bad("derived after the report", &device, later.to_vec::<f32>());
        // The operand that was not poisoned is fine.
        assert_eq!(ones.to_vec::<f32>().unwrap(), vec![1.0; 6], "{device}");
        // A good gather on the same device is Ok.
        let table = Tensor::from_vec(data(6, 3, 1.0), &[3, 2], &device).unwrap();
        let ids = Tensor::from_vec(vec![2u32, 0], &[2], &device).unwrap();
        let good = table
            .index_select(0, &ids)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let t = data(6, 3, 1.0);
        assert_eq!(good, vec![t[4], t[5], t[0], t[1]], "{device}");
        device.synchronize().unwrap();
    }
}

#[test]
fn the_error_follows_the_data_across_threads() {
    for device in gpus() {
        // Made on one thread, read on another.
        let d = device.clone();
        let rows = std::thread::spawn(move || bad_gather(&d).unwrap())
            .join()
            .unwrap();
        assert_bad("read on another thread", &device, rows.to_vec::<f32>());
        // A thread that makes bad data but never reads it: an unrelated thread's ops,
        // readbacks and synchronize stay Ok meanwhile; the maker's synchronize reports it once.
        let (made_tx, made_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let d = device.clone();
        let maker = std::thread::spawn(move || {
            let rows = bad_gather(&d).unwrap();
            made_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let first = d.synchronize();
            let second = d.synchronize();
            (rows, first, second)
        });
        made_rx.recv().unwrap();
        let d = device.clone();
        std::thread::spawn(move || {
            let x = Tensor::from_vec(data(6, 2, 1.0), &[6], &d).unwrap();
            let y = x.mul_scalar(3.0).unwrap();
            assert_eq!(y.to_vec::<f32>().unwrap().len(), 6, "{d}");
            d.synchronize().unwrap();
        })
        .join()
        .unwrap();
        device.synchronize().unwrap();
        go_tx.send(()).unwrap();
        let (rows, first, second) = maker.join().unwrap();
        assert_bad("the maker's synchronize", &device, first);
        second.unwrap();
        // The data itself stays poisoned.
        assert_bad("read after synchronize", &device, rows.to_vec::<f32>());
    }
}

#[test]
fn no_limit_on_threads() {
    for device in gpus() {
        // 80 threads (more than any fixed table of per-thread slots), each with its own bad
        // gather and a good op: each reads its own error, and its good data is Ok.
        let handles: Vec<_> = (0..80)
            .map(|i| {
                let d = device.clone();
                std::thread::spawn(move || {
                    let rows = bad_gather(&d).unwrap();
                    let x = Tensor::from_vec(vec![i as f32; 3], &[3], &d).unwrap();
                    let y = x.add_scalar(1.0).unwrap();
                    let bad = rows.to_vec::<f32>();
                    let good = y.to_vec::<f32>();
                    (i, bad, good, d.synchronize())
                })
            })
            .collect();
        for h in handles {
            let (i, bad, good, sync) = h.join().unwrap();
            assert_bad(&format!("a bad gather of thread {i}"), &device, bad);
            assert_eq!(
                good.unwrap(),
                vec![i as f32 + 1.0; 3],
                "{device}: thread {i}"
            );
            sync.unwrap();
        }
        // Then threads that only do good work: nothing old surfaces.
        for i in 0..70 {
            let d = device.clone();
            std::thread::spawn(move || {
                let x = Tensor::from_vec(vec![1f32, 2.0], &[2], &d).unwrap();
                let ids = Tensor::from_vec(vec![1u32, 0], &[2], &d).unwrap();
                let g = x.index_select(0, &ids).unwrap();
                assert_eq!(
                    g.to_vec::<f32>().unwrap(),
                    vec![2.0, 1.0],
                    "{d}: thread {i}"
                );
                d.synchronize().unwrap();
            })
            .join()
            .unwrap();
        }
    }
}
