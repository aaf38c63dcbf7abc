//! Sizes that used to abort or go wrong (issue: faults found as a new user): broadcast shapes
//! whose element count overflows, host allocations that cannot succeed, and printing huge
//! tensors. On the CPU, every adapter and its GL view; allocations that must fail run in a child
//! process under an address-space cap, so they cannot exhaust the machine.

mod common;

use common::{child_done, devices, gl_views, is_child, run_child};
use wgtensor::{DType, Device, Error, Tensor};

fn all_devices() -> Vec<Device> {
    let mut d = devices();
    d.extend(gl_views());
    d
}

#[test]
fn broadcast_results_that_overflow_the_element_count_are_errors() {
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

const HOST_OOM_CHILD: &str = "host_oom_child";

#[test]
fn host_oom_child() {
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
    run_child(HOST_OOM_CHILD, &[]);
}
