//! Sizes that used to abort or go wrong (issue: faults found as a new user): broadcast shapes
//! whose element count overflows, host allocations that cannot succeed, and printing huge
//! tensors. On the CPU, every adapter and its GL view; allocations that must fail run in a child
//! process under an address-space cap, so they cannot exhaust the machine.

use crate::common;

use common::{child_done, devices, gl_views, is_child, run_child};
use wgtensor::{DType, Device, Error, Tensor};

fn all_devices() -> Vec<Device> {
    let mut d = devices();
    d.extend(gl_views());
    d
}

#[test]
fn broadcast_results_that_overflow_the_element_count_are_errors() {
    let _serial = common::serial();
    for d in all_devices() {
        let one = Tensor::ones(&[1, 1], DType::F32, &d).unwrap();
        let tall = one.expand(&[1 << 32, 1]).unwrap();
        let wide = one.expand(&[1, 1 << 32]).unwrap();
        // 2^32 x 2^32 elements: not a tensor with numel() == 0 (the count wrapped) but an error.
        match tall.add(&wide) {
            Err(Error::ShapeOverflow { shape }) => assert_eq!(shape, vec![1 << 32, 1 << 32]),
            other => panic!(
                "add on {d}: expected ShapeOverflow, got {:?}",
                other.map(|t| t.numel())
            ),
        }
        let mask = Tensor::ones(&[1, 1], DType::U8, &d)
            .unwrap()
            .expand(&[1 << 32, 1])
            .unwrap();
        assert!(
            matches!(
                mask.where_cond(&tall, &wide),
                Err(Error::ShapeOverflow { .. })
            ),
            "where_cond with three broadcast operands on {d}"
        );
        assert!(
            matches!(
                one.expand(&[1 << 40, 1 << 40]),
                Err(Error::ShapeOverflow { .. })
            ),
            "expand on {d}"
        );
        // Nothing was lost: the operands still read back.
        assert_eq!(
            tall.narrow(0, 5, 1).unwrap().to_vec::<f32>().unwrap(),
            vec![1.0]
        );
    }
}

#[test]
fn printing_a_huge_tensor_reads_only_its_edges() {
    let _serial = common::serial();
    for d in all_devices() {
        // 2^34 elements as a broadcast view: 64 GiB if it were gathered on the host.
        let big = Tensor::arange(0.0, 8.0, 1.0, &d)
            .unwrap()
            .reshape(&[1, 8])
            .unwrap()
            .expand(&[1 << 31, 8])
            .unwrap();
        let s = big.to_string();
        assert!(s.starts_with("tensor([[0., 1., 2.,"), "{d}: {s}");
        assert!(s.contains("5., 6., 7.]") && s.contains("..."), "{d}: {s}");
        // The same summary as PyTorch gives for a small tensor of the same structure.
        let small = Tensor::arange(0.0, 8.0, 1.0, &d)
            .unwrap()
            .reshape(&[1, 8])
            .unwrap()
            .expand(&[200, 8])
            .unwrap();
        let lines: Vec<&str> = s.lines().collect();
        let small_lines: Vec<String> = small.to_string().lines().map(String::from).collect();
        assert_eq!(lines.len(), small_lines.len(), "{d}: {s}");
    }
}

const HOST_OOM_CHILD: &str = "sizes::host_oom_child";

#[test]
fn host_oom_child() {
    let _serial = common::serial();
    if !is_child(HOST_OOM_CHILD) {
        return;
    }
    // 4 GiB more address space than the process maps now: far less than the requests below.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let vm: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let cap = vm * 1024 + (4 << 30);
    let lim = libc::rlimit {
        rlim_cur: cap,
        rlim_max: libc::RLIM_INFINITY,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);

    let cpu = Device::cpu();
    let a = Tensor::ones(&[1 << 20, 1], DType::F32, &cpu).unwrap();
    let b = Tensor::ones(&[1, 1 << 18], DType::F32, &cpu).unwrap();
    // 2^38 f32 (1 TiB) of output: an error naming matmul, not an abort.
    match a.matmul(&b) {
        Err(Error::OutOfMemory { op, requested, .. }) => {
            assert_eq!(op, "matmul");
            assert_eq!(requested, 4 << 38);
        }
        other => panic!("expected OutOfMemory, got {:?}", other.map(|t| t.numel())),
    }
    // Elementwise results of a huge broadcast view on the CPU: the same error.
    let wide = Tensor::ones(&[1], DType::F32, &cpu)
        .unwrap()
        .expand(&[1 << 36])
        .unwrap();
    assert!(matches!(wide.exp(), Err(Error::OutOfMemory { .. })));
    // And the process goes on: small work still runs.
    assert_eq!(
        (&a.narrow(0, 0, 2).unwrap() * 3.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![3.0; 2]
    );
    child_done(HOST_OOM_CHILD);
}

#[test]
fn host_allocations_that_cannot_succeed_are_out_of_memory_errors() {
    let _serial = common::serial();
    run_child(HOST_OOM_CHILD, &[]);
}

#[test]
fn one_request_too_large_for_the_adapter_is_one_error_naming_the_op() {
    let _serial = common::serial();
    let gpus: Vec<Device> = all_devices().into_iter().filter(|d| d.is_gpu()).collect();
    for d in gpus {
        let view = Tensor::ones(&[1, 3], DType::F32, &d)
            .unwrap()
            .expand(&[1 << 36, 3])
            .unwrap();
        d.synchronize().unwrap();
        let reserved = wgtensor::memory_reserved(&d);
        let n = 1usize << 38; // 1 TiB of f32: past max_buffer_size on every adapter
        let results = [
            ("zeros", Tensor::zeros(&[n], DType::F32, &d).map(|_| ())),
            ("ones", Tensor::ones(&[n], DType::F32, &d).map(|_| ())),
            ("full", Tensor::full(&[n], 2.0, DType::I32, &d).map(|_| ())),
            ("arange", Tensor::arange(0.0, n as f32, 1.0, &d).map(|_| ())),
        ];
        for (name, r) in results {
            match r {
                Err(Error::BufferTooLarge { op, limit_name, .. }) => {
                    assert_eq!((op, limit_name), (name, "max_buffer_size"), "{name} on {d}")
                }
                other => panic!("{name} on {d}: expected BufferTooLarge, got {other:?}"),
            }
        }
        // Ops that run in row blocks check the whole output before the first block.
        for (name, r) in [
            ("exp", view.exp().and_then(|t| t.contiguous()).map(|_| ())),
            (
                "contiguous",
                view.contiguous().and_then(|t| t.exp()).map(|_| ()),
            ),
        ] {
            assert!(
                matches!(r, Err(Error::BufferTooLarge { .. })),
                "{name} of a 768 GiB view on {d}: {r:?}"
            );
        }
        d.synchronize().unwrap();
        assert_eq!(
            wgtensor::memory_reserved(&d),
            reserved,
            "nothing was allocated for requests that cannot succeed on {d}"
        );
    }
}

#[test]
fn integer_fills_out_of_range_are_errors_not_saturation() {
    let _serial = common::serial();
    for d in all_devices() {
        for (dtype, v) in [
            (DType::I32, 1e20),
            (DType::U8, -1.0),
            (DType::I32, f64::NAN),
            (DType::U32, -3.0),
        ] {
            match Tensor::full(&[4], v, dtype, &d) {
                Err(Error::InvalidArgument { op, message }) => {
                    assert_eq!(op, "full");
                    assert!(message.contains(&v.to_string()), "{message}");
                }
                other => panic!("full({v}, {dtype}) on {d}: {:?}", other.map(|_| ())),
            }
        }
        // In-range values of every dtype fill on the device (no upload) and read back.
        wgtensor::reset_transfer_stats(&d);
        let u8s = Tensor::full(&[5], 255.0, DType::U8, &d).unwrap();
        let i32s = Tensor::full(&[3], -7.0, DType::I32, &d).unwrap();
        let f16s = Tensor::full(&[3], 0.1, DType::F16, &d).unwrap();
        if d.is_gpu() {
            assert_eq!(
                wgtensor::transfer_stats(&d).uploads,
                0,
                "fills upload nothing on {d}"
            );
        }
        assert_eq!(u8s.to_vec::<u8>().unwrap(), vec![255; 5]);
        assert_eq!(i32s.to_vec::<i32>().unwrap(), vec![-7; 3]);
        assert_eq!(
            f16s.to_vec::<wgtensor::f16>().unwrap(),
            vec![wgtensor::f16::from_f32(0.1); 3]
        );
    }
}

#[test]
fn shape_errors_state_the_rule_of_the_op_that_failed() {
    let _serial = common::serial();
    use wgtensor::nn::{Linear, Module};
    let d = Device::cpu();
    let a = Tensor::zeros(&[2, 3], DType::F32, &d).unwrap();
    let b = Tensor::zeros(&[4, 5], DType::F32, &d).unwrap();
    let m = a.matmul(&b).unwrap_err().to_string();
    assert!(
        m.contains("same K") && !m.contains("broadcasting needs"),
        "{m}"
    );
    let lin = Linear::new(4, 2, true, &d).unwrap();
    let l = lin.forward(&a).unwrap_err().to_string();
    assert!(l.contains("in_features"), "{l}");
    let y = a.requires_grad_(true).sum(0, false).unwrap();
    let g = y.backward_with(&b).unwrap_err().to_string();
    assert!(g.contains("shape of the tensor it belongs to"), "{g}");
    let s = a.add(&b).unwrap_err().to_string();
    assert!(s.contains("broadcasting needs each trailing dim"), "{s}");
}

#[test]
fn f16_conversion_past_one_binding_is_exact() {
    let _serial = common::serial();
    // 2^25 + 1 f32 elements exceed one 128 MiB binding: the conversion runs in row blocks whose
    // f16 outputs are odd numbers of halves (not whole words) and must still join exactly.
    for d in all_devices().into_iter().filter(|d| d.is_gpu()) {
        let n = (1usize << 25) + 1;
        let host: Vec<f32> = (0..n).map(|i| (i % 2048) as f32 - 1024.0).collect();
        let t = Tensor::from_vec(host, &[n], &d).unwrap();
        let h = t.to_dtype(DType::F16).unwrap();
        let back = h.to_dtype(DType::F32).unwrap();
        let wrong = back
            .map_read(|v: &[f32]| {
                v.iter()
                    .enumerate()
                    .filter(|&(i, &x)| x != (i % 2048) as f32 - 1024.0)
                    .count()
            })
            .unwrap();
        assert_eq!(
            wrong, 0,
            "{wrong} of {n} elements wrong after f32 -> f16 -> f32 on {d}"
        );
    }
}

#[test]
fn cross_entropy_of_an_empty_batch_is_nan() {
    let _serial = common::serial();
    for d in all_devices() {
        let logits = Tensor::zeros(&[0, 5], DType::F32, &d).unwrap();
        let ids = Tensor::from_vec(Vec::<u32>::new(), &[0], &d).unwrap();
        let loss = wgtensor::nn::cross_entropy(&logits, &ids).unwrap();
        assert!(loss.to_scalar::<f32>().unwrap().is_nan(), "{d}");
    }
}

#[test]
fn float_ids_are_told_to_become_integers() {
    let _serial = common::serial();
    let d = Device::cpu();
    let table = Tensor::zeros(&[4, 2], DType::F32, &d).unwrap();
    let ids = Tensor::from_vec(vec![1f32, 2.0], &[2], &d).unwrap();
    let e = table.index_select(0, &ids).unwrap_err().to_string();
    assert!(e.contains("DType::U32") && !e.contains("DType::F32"), "{e}");
}
