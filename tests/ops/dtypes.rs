//! `to_dtype` between all five dtypes on every device (contiguous, odd-offset and strided views),
//! against hand-computed Rust `as` results on the CPU and the CPU's bits on every GPU; f16
//! storage round trips.

use crate::common;

use common::devices;
use half::f16;
use wgtensor::{DType, Device, Tensor};

const ALL: [DType; 5] = [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8];

/// The elements as comparable integers: float bits (every NaN mapped to one value, since
/// payloads may differ), integers as themselves.
pub fn canon(t: &Tensor) -> Vec<u64> {
    const NAN: u64 = u64::MAX;
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| if x.is_nan() { NAN } else { x.to_bits() as u64 })
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|x| if x.is_nan() { NAN } else { x.to_bits() as u64 })
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&x| x as u32 as u64)
            .collect(),
        DType::U32 => t
            .to_vec::<u32>()
            .unwrap()
            .iter()
            .map(|&x| x as u64)
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .map(|&x| x as u64)
            .collect(),
    }
}

fn f32_edges() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.5,
        -2.7,
        2.5,
        -2.5,
        0.499_999_97,
        65504.0,
        65519.0,
        65520.0,
        1e6,
        -1e10,
        3e9,
        5e9,
        255.9,
        256.0,
        -0.9,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-7,
        6e-8,
        2.980_232_2e-8, // 2^-25: the tie between 0 and the smallest f16 subnormal
        3.0e-8,
        1e-5,
        6.1e-5,
        2_147_483_520.0,
        -2_147_483_648.0,
        4_294_967_040.0,
        1.000_488_3, // 1 + 2^-11: ties to even (1.0) in f16
        1.001_464_8, // 1 + 3 * 2^-11: ties to even (1 + 2^-9)
        -7.25,
    ]
}

/// One tensor per dtype holding that dtype's edge values (odd lengths on purpose).
fn sources(d: &Device) -> Vec<Tensor> {
    let f = f32_edges();
    let mut h: Vec<f16> = f.iter().map(|&x| f16::from_f32(x)).collect();
    h.extend(
        [
            0x0001u16, 0x03ff, 0x8001, 0x7bff, 0xfbff, 0x7e00, 0x7c01, 0x0400,
        ]
        .map(f16::from_bits),
    );
    let i = vec![
        0i32,
        1,
        -1,
        i32::MAX,
        i32::MIN,
        255,
        256,
        -256,
        16_777_217,
        65519,
        65520,
        70000,
        -300,
    ];
    let u = vec![
        0u32,
        1,
        u32::MAX,
        1 << 31,
        255,
        256,
        300,
        16_777_217,
        65520,
        7,
    ];
    let b = vec![0u8, 1, 127, 128, 255, 44, 9];
    vec![
        Tensor::from_slice(&f, &[f.len()], d).unwrap(),
        Tensor::from_slice(&h, &[h.len()], d).unwrap(),
        Tensor::from_slice(&i, &[i.len()], d).unwrap(),
        Tensor::from_slice(&u, &[u.len()], d).unwrap(),
        Tensor::from_slice(&b, &[b.len()], d).unwrap(),
    ]
}

/// Views of `t` (1-D, length n): whole, narrowed at an odd offset, and a transposed 2-D view
/// that reads every element twice with a stride.
fn views(t: &Tensor) -> Vec<(String, Tensor)> {
    let n = t.numel();
    let two = Tensor::stack(&[t, t], 1).unwrap(); // [n, 2], contiguous
    vec![
        ("whole".into(), t.clone()),
        ("narrow(1..n-1)".into(), t.narrow(0, 1, n - 2).unwrap()),
        (
            "transposed, offset 1".into(),
            two.t().unwrap().narrow(1, 1, n - 1).unwrap(),
        ),
    ]
}

#[test]
fn to_dtype_follows_rust_as_on_the_cpu() {
    let d = Device::cpu();
    let f = f32_edges();
    let t = Tensor::from_slice(&f, &[f.len()], &d).unwrap();
    let want_i: Vec<i32> = f.iter().map(|&x| x as i32).collect();
    let want_u: Vec<u32> = f.iter().map(|&x| x as u32).collect();
    let want_b: Vec<u8> = f.iter().map(|&x| x as u8).collect();
    let want_h: Vec<u16> = f.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
    assert_eq!(
        t.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        want_i
    );
    assert_eq!(
        t.to_dtype(DType::U32).unwrap().to_vec::<u32>().unwrap(),
        want_u
    );
    assert_eq!(
        t.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
        want_b
    );
    let h: Vec<u16> = t
        .to_dtype(DType::F16)
        .unwrap()
        .to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    for (k, (&g, &w)) in h.iter().zip(&want_h).enumerate() {
        if f[k].is_nan() {
            assert!(f16::from_bits(g).is_nan(), "NaN -> f16 NaN");
        } else {
            assert_eq!(g, w, "f32 {} -> f16", f[k]);
        }
    }
    // A few spelled out, so the reference above is not the only oracle.
    let picks = |v: &[i32]| (v[2], v[17], v[18], v[19], v[12]);
    assert_eq!(picks(&want_i), (1, 0, i32::MAX, i32::MIN, i32::MAX));
    assert_eq!(f16::from_f32(65520.0), f16::INFINITY);
    assert_eq!(f16::from_f32(65519.0).to_f32(), 65504.0);
    let ints = Tensor::from_vec(vec![-1i32, 300, 70000], &[3], &d).unwrap();
    assert_eq!(
        ints.to_dtype(DType::U32).unwrap().to_vec::<u32>().unwrap(),
        vec![u32::MAX, 300, 70000]
    );
    assert_eq!(
        ints.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
        vec![255, 44, 112]
    );
    let h = ints.to_dtype(DType::F16).unwrap().to_vec::<f16>().unwrap();
    assert_eq!(h[1].to_f32(), 300.0);
    assert!(h[2].is_infinite());
}

#[test]
fn to_dtype_all_pairs_and_views_match_the_cpu_on_every_device() {
    let cpu_sources = sources(&Device::cpu());
    // GL views too: another shader compiler, and no SHADER_F16.
    for d in devices().into_iter().chain(common::gl_views()) {
        for (src_cpu, src) in cpu_sources.iter().zip(sources(&d)) {
            for ((name, v_cpu), (_, v)) in views(src_cpu).into_iter().zip(views(&src)) {
                for to in ALL {
                    let want = v_cpu.to_dtype(to).unwrap();
                    let got = v.to_dtype(to).unwrap();
                    assert_eq!(got.dtype(), to);
                    assert_eq!(got.device(), &d);
                    assert_eq!(got.shape(), v.shape());
                    assert_eq!(
                        canon(&got),
                        canon(&want),
                        "{} -> {to} of the {name} view on {d}",
                        src.dtype()
                    );
                }
                // contiguous() of every dtype's view is the same strided copy.
                assert_eq!(
                    canon(&v.contiguous().unwrap()),
                    canon(&v_cpu),
                    "{name} on {d}"
                );
            }
        }
    }
}

#[test]
fn same_dtype_is_a_cheap_clone_and_empty_tensors_convert() {
    for d in devices() {
        let t = Tensor::ones(&[3], DType::I32, &d).unwrap();
        let same = t.to_dtype(DType::I32).unwrap();
        assert_eq!(same.to_vec::<i32>().unwrap(), vec![1, 1, 1]);
        for to in ALL {
            let e = Tensor::zeros(&[0, 3], DType::F16, &d)
                .unwrap()
                .to_dtype(to)
                .unwrap();
            assert_eq!((e.shape(), e.dtype()), (&[0, 3][..], to), "{d}");
            let one = Tensor::full(&[1], 7.0, DType::U8, &d)
                .unwrap()
                .to_dtype(to)
                .unwrap();
            assert_eq!(
                canon(&one),
                canon(&Tensor::full(&[1], 7.0, to, &Device::cpu()).unwrap())
            );
        }
    }
}

#[test]
fn every_f16_bit_pattern_round_trips_exactly() {
    let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    for d in devices() {
        let t = Tensor::from_slice(&all, &[all.len()], &d).unwrap();
        // Storage round trip: the same bits, NaN payloads included.
        let back = t.to_vec::<f16>().unwrap();
        assert!(
            back.iter()
                .zip(&all)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{d}"
        );
        // Through f32 and back: exact for every non-NaN value, NaN stays NaN.
        let f = t.to_dtype(DType::F32).unwrap();
        let fv = f.to_vec::<f32>().unwrap();
        let again = f.to_dtype(DType::F16).unwrap().to_vec::<f16>().unwrap();
        for (k, x) in all.iter().enumerate() {
            if x.is_nan() {
                assert!(
                    fv[k].is_nan() && again[k].is_nan(),
                    "NaN {:#06x} on {d}",
                    x.to_bits()
                );
            } else {
                assert_eq!(fv[k], x.to_f32(), "{:#06x} -> f32 on {d}", x.to_bits());
                assert_eq!(
                    again[k].to_bits(),
                    x.to_bits(),
                    "{:#06x} on {d}",
                    x.to_bits()
                );
            }
        }
    }
}

/// Whether `word` stands in `text` as a whole word (not inside `softplus` for `plus`).
fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == word)
}

/// The docs that list ops are checked against the op tables, so they cannot drift: the
/// float-only list of `DType`'s rustdoc names every float-only op (and no other), and the
/// guide's op list names every elementwise op and comparison.
#[test]
fn dtype_docs_list_every_op_of_the_tables() {
    use wgtensor::testing::{binary_ops, compare_ops, unary_ops};
    let src = include_str!("../../src/dtype.rs");
    let start = src
        .find("Float-only ops (")
        .expect("DType docs list the float-only ops");
    let list = &src[start..start + src[start..].find(')').unwrap()];
    let names = || {
        let u = unary_ops().into_iter().map(|o| (o.name(), o.float_only()));
        u.chain(binary_ops().into_iter().map(|o| (o.name(), o.float_only())))
    };
    for (name, float_only) in names() {
        assert_eq!(
            has_word(list, name),
            float_only,
            "src/dtype.rs's float-only list and the op table disagree on {name}: {list}"
        );
    }
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/tensors.md"))
        .expect("docs/tensors.md");
    let cmp = compare_ops().into_iter().map(|o| o.name());
    for name in names().map(|(n, _)| n).chain(cmp) {
        assert!(
            has_word(&guide, name),
            "docs/tensors.md does not list {name}"
        );
    }
}
