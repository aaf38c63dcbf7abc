//! Bad input and faults from /work/shared/FAULTS.md, rows 1, 2, 3, 4, 8, 13 and 22, on the CPU
//! and every GPU: each returns `Ok` with the documented value or a typed `Err` naming the
//! problem, never panics, and leaves a sentinel tensor intact. The device-level rows (14 bad
//! device strings, 15 no adapter, 18 device lost) are in `tests/faults/device_faults.rs`.

use crate::common;

use common::{devices, gpus, values};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use wgtensor::testing::{binary_ops, unary_ops};
use wgtensor::{f16, DType, Device, Error, Result, Tensor};

/// Row 22 injects an error that the *next* call on the device reports, whichever thread makes
/// it, so it runs alone: every other test holding GPU tensors takes this lock shared.
static GPU: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    GPU.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    GPU.write().unwrap_or_else(|p| p.into_inner())
}

type UnaryFn = Box<dyn Fn(&Tensor) -> Result<Tensor>>;
type BinaryFn = Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor>>;
type ScalarFn = Box<dyn Fn(&Tensor, f32) -> Result<Tensor>>;

/// Every unary op of the table (`wgtensor::testing::unary_ops()`), so a new op is swept here
/// without editing this file.
fn unary() -> Vec<(&'static str, UnaryFn)> {
    unary_ops()
        .into_iter()
        .map(|op| (op.name(), Box::new(move |t: &Tensor| op.call(t)) as UnaryFn))
        .collect()
}

/// Every binary op of the table, with its tensor-scalar form.
fn binary() -> Vec<(&'static str, BinaryFn, ScalarFn)> {
    binary_ops()
        .into_iter()
        .map(|op| {
            let f = Box::new(move |a: &Tensor, b: &Tensor| op.call(a, b)) as BinaryFn;
            let s = Box::new(move |t: &Tensor, x: f32| op.call_scalar(t, x)) as ScalarFn;
            (op.name(), f, s)
        })
        .collect()
}

/// Whether the table declares the op float-only (integer tensors refuse it).
fn float_only(name: &str) -> bool {
    let unary = unary_ops().into_iter().map(|o| (o.name(), o.float_only()));
    let binary = binary_ops().into_iter().map(|o| (o.name(), o.float_only()));
    let mut all = unary.chain(binary);
    all.find(|(n, _)| *n == name).is_some_and(|(_, f)| f)
}

/// A tensor created before a fault; must read back bit-identical afterwards.
struct Sentinel(Tensor, Vec<u32>);

impl Sentinel {
    fn new(d: &Device) -> Sentinel {
        let v = vec![
            1.5f32,
            -0.0,
            f32::from_bits(0x7fc0_0042),
            f32::INFINITY,
            3.25,
        ];
        let bits = v.iter().map(|x| x.to_bits()).collect();
        Sentinel(Tensor::from_vec(v, &[5], d).unwrap(), bits)
    }

    fn check(&self, after: &str) {
        let got: Vec<u32> = values(&self.0).iter().map(|x| x.to_bits()).collect();
        assert_eq!(
            got,
            self.1,
            "sentinel on {} changed after {after}",
            self.0.device()
        );
    }
}

// Row 1 ----------------------------------------------------------------------------------------

type Create = fn(&[usize], DType, &Device) -> Result<Tensor>;

/// Every way to make a tensor of a given shape (rand/randn/from_vec are f32 whatever the dtype).
const CREATE: [(&str, Create); 6] = [
    ("zeros", Tensor::zeros),
    ("ones", Tensor::ones),
    ("full", |s, t, d| Tensor::full(s, 2.0, t, d)),
    ("rand", |s, _, d| Tensor::rand(s, d)),
    ("randn", |s, _, d| Tensor::randn(s, d)),
    ("from_vec", |s, _, d| {
        Tensor::from_vec(Vec::<f32>::new(), s, d)
    }),
];

#[test]
fn row01_overflowing_shapes_are_shape_overflow_errors() {
    let _g = shared();
    let count_overflows: &[&[usize]] = &[
        &[1 << 40, 1 << 40],
        &[usize::MAX, 2],
        &[2, 1 << 33, 1 << 33],
    ];
    // [2^31, 2^31]: the element count fits in usize, the byte count does not (2^62 f32 = 2^64
    // bytes). from_vec is left out: its data exists, so it reports a DataLength mismatch.
    let bytes_overflow: &[usize] = &[1 << 31, 1 << 31];
    let dtypes = [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8];
    let cases = count_overflows
        .iter()
        .flat_map(|&s| dtypes.map(|t| (s, t, &CREATE[..])));
    let cases = cases
        .chain([DType::F32, DType::F16, DType::I32].map(|t| (bytes_overflow, t, &CREATE[..5])));
    let cases: Vec<_> = cases.collect();
    for d in devices() {
        let sentinel = Sentinel::new(&d);
        for &(shape, dtype, creators) in &cases {
            for (name, create) in creators {
                match create(shape, dtype, &d) {
                    Err(e @ Error::ShapeOverflow { .. }) => {
                        assert!(e.to_string().contains(&format!("{shape:?}")), "{e}");
                        let Error::ShapeOverflow { shape: s } = e else {
                            unreachable!()
                        };
                        assert_eq!(s, shape, "{name} {dtype} on {d}");
                    }
                    other => panic!(
                        "{name} {shape:?} {dtype} on {d}: expected ShapeOverflow, got {:?}",
                        other.map(|_| ())
                    ),
                }
            }
        }
        sentinel.check("overflowing shapes");
        d.synchronize().unwrap();
    }
}

// Row 2 ----------------------------------------------------------------------------------------

#[test]
fn row02_empty_tensors_pass_through_every_op() {
    let _g = shared();
    let shapes: &[&[usize]] = &[&[0], &[0, 5], &[3, 0, 2]];
    for d in devices() {
        let sentinel = Sentinel::new(&d);
        for &shape in shapes {
            let ctx = |what: &str| format!("{what} on empty {shape:?} on {d}");
            let check = |what: &str, r: Result<Tensor>, want: &[usize]| {
                let t = r.unwrap_or_else(|e| panic!("{}: {e}", ctx(what)));
                assert_eq!(
                    (t.shape(), t.device(), t.numel()),
                    (want, &d, 0),
                    "{}",
                    ctx(what)
                );
                assert_eq!(values(&t), Vec::<f32>::new(), "{}", ctx(what));
            };
            let x = Tensor::from_vec(Vec::<f32>::new(), shape, &d).unwrap();
            for (name, create) in CREATE {
                check(name, create(shape, DType::F32, &d), shape);
            }
            check("contiguous", x.contiguous(), shape);
            assert_eq!(
                x.cpu().unwrap().to_vec::<f32>().unwrap(),
                Vec::<f32>::new(),
                "{}",
                ctx("cpu()")
            );
            for g in gpus() {
                check("to gpu", x.to(&g).and_then(|t| t.to(&d)), shape);
            }
            for (name, f) in unary() {
                check(name, f(&x), shape);
            }
            // Same shape, a broadcast against [1] (the strided kernels) and against the last dim.
            let one = Tensor::from_vec(vec![2.0f32], &[1], &d).unwrap();
            let last = *shape.last().unwrap();
            let row = Tensor::from_vec(vec![1.0f32; last], &[last], &d).unwrap();
            for (name, f, s) in binary() {
                check(name, f(&x, &x), shape);
                check(name, f(&x, &one), shape);
                check(name, f(&one, &x), shape);
                check(name, f(&row, &x), shape);
                check(&format!("{name}_scalar"), s(&x, 2.0), shape);
            }
            // Every row op of the table (cross-entropy gives one loss per row: none here).
            for op in wgtensor::testing::row_ops() {
                let t = op
                    .call(&x)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx(op.name())));
                assert_eq!((t.numel(), t.device()), (0, &d), "{}", ctx(op.name()));
            }
            check("2.0 - x", 2.0 - &x, shape);
            check("2.0 / x", 2.0 / &x, shape);
            check("-x", -&x, shape);
            // [0, 5] + [3, 1, 5] broadcasts to [3, 0, 5].
            if shape == [0, 5] {
                let y = Tensor::zeros(&[3, 1, 5], DType::F32, &d).unwrap();
                check("add [3,1,5]", x.add(&y), &[3, 0, 5]);
            }
            assert!(matches!(
                x.to_scalar::<f32>(),
                Err(Error::InvalidArgument { .. })
            ));
            let shown = x.to_string();
            assert!(shown.contains(&format!("device='{d}'")), "{shown}");
            for dtype in [DType::F16, DType::I32, DType::U32, DType::U8] {
                let t = Tensor::zeros(shape, dtype, &d).unwrap();
                assert_eq!(
                    t.cpu().unwrap().numel(),
                    0,
                    "{}",
                    ctx(&format!("zeros of {dtype}"))
                );
            }
            assert_eq!(
                Tensor::from_vec(Vec::<u8>::new(), shape, &d)
                    .unwrap()
                    .to_vec::<u8>()
                    .unwrap(),
                Vec::<u8>::new()
            );
        }
        check_arange_empty(&d);
        // A zero-sized binding reaching wgpu would be a validation error reported here.
        d.synchronize()
            .unwrap_or_else(|e| panic!("{d} after empty tensors: {e}"));
        sentinel.check("empty tensors");
    }
}

fn check_arange_empty(d: &Device) {
    let t = Tensor::arange(2.0, 2.0, 1.0, d).unwrap();
    assert_eq!((t.shape(), values(&t)), (&[0][..], Vec::<f32>::new()));
}

// Row 3 ----------------------------------------------------------------------------------------

#[test]
fn row03_data_length_mismatch_names_expected_and_actual() {
    let _g = shared();
    for d in devices() {
        let sentinel = Sentinel::new(&d);
        let cases: Vec<(&str, &[usize], usize, Result<Tensor>)> = vec![
            (
                "from_vec",
                &[2, 3],
                5,
                Tensor::from_vec(vec![1f32; 5], &[2, 3], &d),
            ),
            (
                "from_slice",
                &[2, 3],
                7,
                Tensor::from_slice(&[1f32; 7], &[2, 3], &d),
            ),
            (
                "from_vec",
                &[2, 4],
                7,
                Tensor::from_vec(vec![1u8; 7], &[2, 4], &d),
            ),
            (
                "from_vec",
                &[3],
                2,
                Tensor::from_vec(vec![f16::ONE; 2], &[3], &d),
            ),
            (
                "from_vec",
                &[4],
                0,
                Tensor::from_vec(Vec::<i32>::new(), &[4], &d),
            ),
            (
                "from_vec",
                &[],
                0,
                Tensor::from_vec(Vec::<f32>::new(), &[], &d),
            ),
            (
                "from_vec",
                &[0, 3],
                1,
                Tensor::from_vec(vec![1u32], &[0, 3], &d),
            ),
        ];
        for (want_op, shape, actual, r) in cases {
            let expected: usize = shape.iter().product();
            match r {
                Err(e @ Error::DataLength { .. }) => {
                    let msg = e.to_string();
                    let Error::DataLength {
                        op,
                        shape: s,
                        expected: x,
                        actual: a,
                    } = e
                    else {
                        unreachable!()
                    };
                    assert_eq!(
                        (op, s.as_slice(), x, a),
                        (want_op, shape, expected, actual),
                        "on {d}"
                    );
                    for part in [
                        format!("{shape:?}"),
                        format!("{expected} elements"),
                        format!("has {actual}"),
                    ] {
                        assert!(msg.contains(&part), "message lacks {part:?}: {msg}");
                    }
                }
                other => panic!(
                    "{shape:?} with {actual} values on {d}: got {:?}",
                    other.map(|_| ())
                ),
            }
        }
        sentinel.check("data length errors");
    }
}

// Row 4 ----------------------------------------------------------------------------------------

#[test]
fn row04_odd_byte_lengths_are_padded_transparently() {
    let _g = shared();
    for d in devices() {
        let sentinel = Sentinel::new(&d);
        for n in [1usize, 2, 3, 5, 7, 9] {
            let bytes: Vec<u8> = (0..n).map(|i| 250 - i as u8).collect();
            let halves: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 - 1.5)).collect();
            let tb = Tensor::from_slice(&bytes, &[n], &d).unwrap();
            let th = Tensor::from_slice(&halves, &[n], &d).unwrap();
            assert_eq!(tb.to_vec::<u8>().unwrap(), bytes, "u8 n={n} on {d}");
            let back: Vec<u16> = th
                .to_vec::<f16>()
                .unwrap()
                .iter()
                .map(|h| h.to_bits())
                .collect();
            assert_eq!(
                back,
                halves.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
                "f16 n={n} on {d}"
            );
            assert_eq!(
                Tensor::full(&[n], 7.0, DType::U8, &d)
                    .unwrap()
                    .to_vec::<u8>()
                    .unwrap(),
                vec![7; n]
            );
            assert_eq!(
                Tensor::zeros(&[n], DType::U8, &d)
                    .unwrap()
                    .to_vec::<u8>()
                    .unwrap(),
                vec![0; n]
            );
            if d.is_gpu() {
                // The view covers the elements only; the buffer underneath is padded to 4 bytes.
                let v = tb.wgpu_buffer().unwrap();
                assert_eq!((v.offset, v.size), (0, n as u64));
                assert!(v.buffer.size() >= n as u64 && v.buffer.size().is_multiple_of(4));
                assert_eq!(th.wgpu_buffer().unwrap().size, 2 * n as u64);
                assert_eq!(
                    tb.cpu().unwrap().to(&d).unwrap().to_vec::<u8>().unwrap(),
                    bytes
                );
            }
        }
        sentinel.check("odd-length uploads");
    }
}

// Row 8 ----------------------------------------------------------------------------------------

#[test]
fn row08_incompatible_broadcast_names_op_and_shapes() {
    let _g = shared();
    for d in devices() {
        let a = Tensor::zeros(&[3, 1], DType::F32, &d).unwrap();
        let b = Tensor::ones(&[2, 2], DType::F32, &d).unwrap();
        for (name, f, _) in binary() {
            for (l, r) in [(&a, &b), (&b, &a)] {
                let e = f(l, r).err().unwrap_or_else(|| {
                    panic!("{name} {:?} {:?} on {d} succeeded", l.shape(), r.shape())
                });
                let msg = e.to_string();
                match e {
                    Error::ShapeMismatch { op, lhs, rhs } => {
                        assert_eq!(
                            (op, lhs.as_slice(), rhs.as_slice()),
                            (name, l.shape(), r.shape())
                        );
                    }
                    other => panic!("{name} on {d}: expected ShapeMismatch, got {other:?}"),
                }
                for part in [name, "[3, 1]", "[2, 2]"] {
                    assert!(msg.contains(part), "message lacks {part:?}: {msg}");
                }
            }
        }
        assert!(matches!(
            (&a + &b).err(),
            Some(Error::ShapeMismatch { op: "add", .. })
        ));
    }
}

// Row 13 ---------------------------------------------------------------------------------------

fn expect_device_mismatch(r: Result<Tensor>, op: &str, lhs: &Device, rhs: &Device) {
    match r {
        Err(e @ Error::DeviceMismatch { .. }) => {
            let msg = e.to_string();
            for part in [lhs.to_string(), rhs.to_string(), ".to(".into(), op.into()] {
                assert!(msg.contains(&part), "message lacks {part:?}: {msg}");
            }
            let Error::DeviceMismatch {
                op: o,
                lhs: l,
                rhs: r,
            } = e
            else {
                unreachable!()
            };
            assert_eq!((o, l, r), (op, lhs.to_string(), rhs.to_string()));
        }
        other => panic!(
            "{op} {lhs} with {rhs}: expected DeviceMismatch, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[test]
fn row13_mixing_devices_is_a_device_mismatch() {
    let _g = shared();
    let cpu = Device::cpu();
    let c = Tensor::ones(&[4], DType::F32, &cpu).unwrap();
    for g in gpus() {
        let t = c.to(&g).unwrap();
        for (name, f, _) in binary() {
            expect_device_mismatch(f(&c, &t), name, &cpu, &g);
            expect_device_mismatch(f(&t, &c), name, &g, &cpu);
        }
        expect_device_mismatch(&c + &t, "add", &cpu, &g);
        let msg = c.add(&t).err().unwrap().to_string();
        assert!(
            msg.contains("cpu") && msg.contains("gpu:0") && msg.contains(".to("),
            "{msg}"
        );
        match "gl:0".parse::<Device>() {
            Ok(gl) if gl != g => {
                let u = c.to(&gl).unwrap();
                expect_device_mismatch(t.add(&u), "add", &g, &gl);
                expect_device_mismatch(u.mul(&t), "mul", &gl, &g);
            }
            Ok(_) => eprintln!("row13: gl:0 is {g} itself here; gpu:0 vs gl:0 SKIPPED"),
            Err(e) => eprintln!("row13: gl:0 unavailable ({e}); gpu:0 vs gl:0 SKIPPED"),
        }
    }
}

#[test]
fn row13_mixing_dtypes_is_a_dtype_mismatch_and_ops_a_dtype_lacks_are_unsupported() {
    let _g = shared();
    for d in devices() {
        let f = Tensor::ones(&[3], DType::F32, &d).unwrap();
        let i = Tensor::from_vec(vec![1i32, 2, 3], &[3], &d).unwrap();
        let h = Tensor::ones(&[3], DType::F16, &d).unwrap();
        for (name, op, _) in binary() {
            for (l, r) in [(&f, &i), (&i, &f), (&h, &f)] {
                match op(l, r) {
                    Err(e @ Error::DTypeMismatch { .. }) => {
                        let msg = e.to_string();
                        assert!(
                            msg.contains(l.dtype().as_str()) && msg.contains(r.dtype().as_str()),
                            "{msg}"
                        );
                        let Error::DTypeMismatch { op, lhs, rhs } = e else {
                            unreachable!()
                        };
                        assert_eq!((op, lhs, rhs), (name, l.dtype(), r.dtype()));
                    }
                    other => panic!(
                        "{name} {} with {} on {d}: got {:?}",
                        l.dtype(),
                        r.dtype(),
                        other.map(|_| ())
                    ),
                }
            }
        }
        for dtype in [DType::I32, DType::F16, DType::U32, DType::U8] {
            let t = Tensor::zeros(&[3], dtype, &d).unwrap();
            let unsupported = |what: &str, r: Result<Tensor>| match r {
                Err(e @ Error::UnsupportedDType { .. }) => {
                    assert!(e.to_string().contains(dtype.as_str()), "{e}");
                    let Error::UnsupportedDType {
                        op,
                        dtype: got,
                        device,
                    } = e
                    else {
                        unreachable!()
                    };
                    assert_eq!((op, got, device), (what, dtype, d.to_string()));
                }
                other => panic!("{what} on {dtype} on {d}: got {:?}", other.map(|_| ())),
            };
            // f16 computes everything; i32 / u32 everything but the float-only ops; u8 is
            // storage and masks only.
            let has = |name: &str| match dtype {
                DType::F16 => true,
                DType::I32 | DType::U32 => !float_only(name),
                _ => false,
            };
            let supported = |what: &str, r: Result<Tensor>| {
                let r = r.unwrap_or_else(|e| panic!("{what} on {dtype} on {d}: {e}"));
                assert_eq!((r.dtype(), r.shape()), (dtype, &[3][..]), "{what}");
            };
            for (name, op) in unary() {
                if has(name) {
                    supported(name, op(&t));
                } else {
                    unsupported(name, op(&t));
                }
            }
            for (name, op, scalar) in binary() {
                let scalar_name = format!("{name}_scalar");
                if has(name) {
                    supported(name, op(&t, &t));
                    supported(&scalar_name, scalar(&t, 1.0));
                } else {
                    unsupported(name, op(&t, &t));
                    unsupported(&scalar_name, scalar(&t, 1.0));
                }
            }
            // Creating, moving and reading other dtypes still works.
            assert_eq!(t.cpu().unwrap().dtype(), dtype);
        }
        assert_eq!(i.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
        assert!(matches!(
            i.to_vec::<f32>(),
            Err(Error::DTypeMismatch { op: "to_vec", .. })
        ));
    }
}

// Row 22 ---------------------------------------------------------------------------------------

#[test]
fn row22_uncaptured_wgpu_errors_become_errors_not_panics() {
    let _g = exclusive();
    for g in gpus() {
        let sentinel = Sentinel::new(&g);
        g.synchronize().unwrap();
        let check = |what: &str, op: &str, r: Result<()>| match r {
            Err(Error::Wgpu {
                op: o,
                device,
                message,
            }) => {
                assert_eq!((o, device.as_str()), (op, g.to_string().as_str()), "{what}");
                assert!(
                    message.contains("Validation Error") && message.contains("1 error(s)"),
                    "{what}: {message}"
                );
            }
            other => {
                panic!("{what} on {g} after an injected error: expected Error::Wgpu, got {other:?}")
            }
        };
        wgtensor::testing::inject_uncaptured_error(&g);
        check("add", "add", sentinel.0.add(&sentinel.0).map(|_| ()));
        sentinel.check("an injected validation error (reported by add)");
        let sum = values(&sentinel.0.add(&sentinel.0).unwrap());
        assert_eq!(sum[0], 3.0, "ops work again after the error was reported");

        wgtensor::testing::inject_uncaptured_error(&g);
        check("synchronize", "synchronize", g.synchronize());
        g.synchronize().unwrap();
        sentinel.check("an injected validation error (reported by synchronize)");

        wgtensor::testing::inject_uncaptured_error(&g);
        check("to_vec", "to_vec", sentinel.0.to_vec::<f32>().map(|_| ()));
        sentinel.check("an injected validation error (reported by to_vec)");

        // Two errors before the next call are both counted in one report.
        wgtensor::testing::inject_uncaptured_error(&g);
        wgtensor::testing::inject_uncaptured_error(&g);
        match Tensor::zeros(&[2], DType::F32, &g) {
            Err(Error::Wgpu { message, .. }) => {
                assert!(message.contains("2 error(s)"), "{message}")
            }
            other => panic!("zeros after two injected errors: {:?}", other.map(|_| ())),
        }
        assert_eq!(
            values(&Tensor::zeros(&[2], DType::F32, &g).unwrap()),
            vec![0.0; 2]
        );
        sentinel.check("two injected validation errors");
    }
}

/// Ops of two and three operands all reach the one dispatch point, which refuses operands on
/// different devices with the same typed error whichever operand is elsewhere.
#[test]
fn row13_multi_operand_ops_refuse_mixed_devices() {
    let _g = shared();
    let cpu = Device::cpu();
    let c = Tensor::ones(&[2, 2], DType::F32, &cpu).unwrap();
    let mask = c.gt_scalar(0.5).unwrap();
    for g in gpus() {
        let t = c.to(&g).unwrap();
        let gmask = mask.to(&g).unwrap();
        expect_device_mismatch(c.matmul(&t), "matmul", &cpu, &g);
        expect_device_mismatch(t.matmul(&c), "matmul", &g, &cpu);
        expect_device_mismatch(mask.where_cond(&t, &c), "where_cond", &cpu, &g);
        expect_device_mismatch(gmask.where_cond(&t, &c), "where_cond", &g, &cpu);
        expect_device_mismatch(Tensor::cat(&[&c, &t], 0), "cat", &cpu, &g);
    }
}
