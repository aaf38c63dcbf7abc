//! GGUF reading and writing: round trips of every value and tensor type, llama.cpp's q/k
//! permutation, a file written by the Python `gguf` package, and corrupt or truncated files,
//! which must be typed errors, never panics or huge allocations.

use crate::common;

use common::data;
use std::path::PathBuf;
use wgtensor::models::gguf::{
    unpermute_order, unpermute_qk, GgufDType, GgufFile, GgufTensor, GgufValue, GgufWriter,
};
use wgtensor::{f16, DType, Device, Error, QTensor, QType, Tensor};

/// A path in a directory of the caller's own, removed with the guard (pass or fail).
fn tmp(name: &str) -> (common::TempDir, PathBuf) {
    let dir = common::TempDir::new("gguf");
    let path = dir.join(name);
    (dir, path)
}

/// Writes `bytes` and opens them.
fn open_bytes(name: &str, bytes: &[u8]) -> wgtensor::Result<GgufFile> {
    // The file may go once it is open: the mapping keeps its bytes (Linux, macOS).
    let (_dir, p) = tmp(name);
    std::fs::write(&p, bytes).unwrap();
    GgufFile::open(&p)
}

fn dense(t: GgufTensor) -> Tensor {
    match t {
        GgufTensor::Dense(t) => t,
        GgufTensor::Quantized(q) => panic!("expected a dense tensor, got {q:?}"),
    }
}

fn quant(t: GgufTensor) -> QTensor {
    match t {
        GgufTensor::Quantized(q) => q,
        GgufTensor::Dense(t) => panic!("expected a quantized tensor, got {t:?}"),
    }
}

/// A small valid file: metadata of several types and four tensors.
fn sample() -> GgufWriter {
    let cpu = Device::cpu();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", GgufValue::String("llama".into()));
    w.add_metadata("llama.block_count", GgufValue::U32(2));
    w.add_metadata(
        "tokenizer.ggml.tokens",
        GgufValue::Array(vec![
            GgufValue::String("a".into()),
            GgufValue::String("bc".into()),
        ]),
    );
    w.add_tensor(
        "norm",
        &Tensor::from_vec(data(32, 1, 1.0), &[32], &cpu).unwrap(),
    )
    .unwrap();
    let m = Tensor::from_vec(data(4 * 64, 2, 1.0), &[4, 64], &cpu).unwrap();
    w.add_qtensor("q8", &QTensor::quantize(&m, QType::Q8_0).unwrap())
        .unwrap();
    w.add_qtensor("q4", &QTensor::quantize(&m, QType::Q4_0).unwrap())
        .unwrap();
    w.add_tensor("half", &m.to_dtype(DType::F16).unwrap())
        .unwrap();
    w
}

#[test]
fn every_value_type_round_trips() {
    let values = [
        ("u8", GgufValue::U8(200)),
        ("i8", GgufValue::I8(-100)),
        ("u16", GgufValue::U16(60000)),
        ("i16", GgufValue::I16(-30000)),
        ("u32", GgufValue::U32(4_000_000_000)),
        ("i32", GgufValue::I32(-2_000_000_000)),
        ("u64", GgufValue::U64(u64::MAX)),
        ("i64", GgufValue::I64(i64::MIN)),
        ("f32", GgufValue::F32(1.5e-3)),
        ("f64", GgufValue::F64(-2.25e100)),
        ("bool", GgufValue::Bool(true)),
        ("str", GgufValue::String("héllo".into())),
        (
            "arr",
            GgufValue::Array(vec![GgufValue::F32(1.0), GgufValue::F32(2.0)]),
        ),
        (
            "nested",
            GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::I32(3)])]),
        ),
        ("empty", GgufValue::Array(vec![])),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &values {
        w.add_metadata(k, v.clone());
    }
    let f = open_bytes("values.gguf", &w.to_bytes()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    for (k, v) in &values {
        assert_eq!(f.metadata().get(*k), Some(v), "{k}");
    }
    assert_eq!(f.metadata()["u32"].as_u64(), Some(4_000_000_000));
    assert_eq!(f.metadata()["i8"].as_f64(), Some(-100.0));
}

#[test]
fn every_tensor_type_loads_on_every_device() {
    let cpu = Device::cpu();
    let mut w = sample();
    w.add_metadata("general.alignment", GgufValue::U32(64));
    // BF16 and the K-quants are written raw (wgtensor does not produce them).
    let bf: Vec<f32> = data(2 * 8, 3, 4.0);
    let bf_bytes: Vec<u8> = bf
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
    w.add_raw("bf", vec![8, 2], 30, bf_bytes);
    let k4: Vec<u8> = (0..2 * 144).map(|i| (i * 37 % 251) as u8).collect();
    w.add_raw("k4", vec![256, 2], 12, k4.clone());
    let k6: Vec<u8> = (0..3 * 210).map(|i| (i * 53 % 241) as u8).collect();
    w.add_raw("k6", vec![256, 3], 14, k6.clone());
    let (_dir, path) = tmp("types.gguf");
    w.write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.tensor_infos().len(), 7);
    for t in f.tensor_infos() {
        assert_eq!(t.offset % 64, 0, "{}", t.name);
    }
    let info = f.tensor_info("q8").unwrap();
    assert_eq!(
        (info.dims.clone(), info.dtype),
        (vec![64, 4], GgufDType::Quantized(QType::Q8_0))
    );
    assert_eq!(info.shape(), vec![4, 64]);
    let m = data(4 * 64, 2, 1.0);
    for device in common::devices() {
        let norm = dense(f.load("norm", &device, DType::F32).unwrap());
        assert_eq!(norm.device(), &device);
        assert_eq!(norm.to_vec::<f32>().unwrap(), data(32, 1, 1.0));
        let h = dense(f.load("half", &device, DType::F16).unwrap());
        assert_eq!(h.dtype(), DType::F16);
        let want: Vec<f16> = m.iter().map(|v| f16::from_f32(*v)).collect();
        assert_eq!(h.to_vec::<f16>().unwrap(), want);
        let h32 = dense(f.load("half", &device, DType::F32).unwrap());
        assert_eq!(
            h32.to_vec::<f32>().unwrap(),
            want.iter().map(|v| v.to_f32()).collect::<Vec<_>>()
        );
        let b = dense(f.load("bf", &device, DType::F32).unwrap());
        assert_eq!(b.shape(), &[2, 8]);
        let want: Vec<f32> = bf
            .iter()
            .map(|v| half::bf16::from_f32(*v).to_f32())
            .collect();
        assert_eq!(b.to_vec::<f32>().unwrap(), want);
        for (name, q) in [("q8", QType::Q8_0), ("q4", QType::Q4_0)] {
            let t = quant(f.load(name, &device, DType::F32).unwrap());
            assert_eq!(
                (t.qtype(), t.shape(), t.device()),
                (q, [4, 64], device.clone())
            );
            let direct =
                QTensor::quantize(&Tensor::from_vec(m.clone(), &[4, 64], &cpu).unwrap(), q)
                    .unwrap();
            assert_eq!(
                t.to_ggml().unwrap(),
                direct.to_ggml().unwrap(),
                "{name} on {device}"
            );
        }
        let t = quant(f.load("k4", &device, DType::F32).unwrap());
        assert_eq!((t.shape(), t.to_ggml().unwrap()), ([2, 256], k4.clone()));
        let t = quant(f.load("k6", &device, DType::F32).unwrap());
        assert_eq!((t.shape(), t.to_ggml().unwrap()), ([3, 256], k6.clone()));
    }
    assert!(matches!(
        f.load("nope", &cpu, DType::F32),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        f.load("norm", &cpu, DType::I32),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn qk_rows_are_unpermuted_as_llama_cpp_permuted_them() {
    // llama.cpp's converter: w.reshape(n_head, 2, hd / 2, cols).swapaxes(1, 2).reshape(w.shape)
    let (n_head, hd, cols) = (2, 4, 32);
    let rows = n_head * hd;
    let hf: Vec<f32> = (0..rows * cols).map(|i| (i / cols) as f32).collect();
    let mut permuted = vec![0f32; rows * cols];
    for h in 0..n_head {
        for j in 0..2 {
            for i in 0..hd / 2 {
                let src = h * hd + j * hd / 2 + i;
                let dst = h * hd + i * 2 + j;
                permuted[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&hf[src * cols..(src + 1) * cols]);
            }
        }
    }
    let cpu = Device::cpu();
    let p = Tensor::from_vec(permuted.clone(), &[rows, cols], &cpu).unwrap();
    let mut w = GgufWriter::new();
    w.add_tensor("attn_q", &p).unwrap();
    w.add_qtensor("attn_q8", &QTensor::quantize(&p, QType::Q8_0).unwrap())
        .unwrap();
    let f = open_bytes("qk.gguf", &w.to_bytes()).unwrap();
    for device in common::devices() {
        let u = dense(
            f.load_unpermuted("attn_q", &device, DType::F32, n_head)
                .unwrap(),
        );
        assert_eq!(u.to_vec::<f32>().unwrap(), hf);
        let u =
            dense(unpermute_qk(&f.load("attn_q", &device, DType::F32).unwrap(), n_head).unwrap());
        assert_eq!(u.to_vec::<f32>().unwrap(), hf);
        let q = quant(
            f.load_unpermuted("attn_q8", &device, DType::F32, n_head)
                .unwrap(),
        );
        let got = q
            .to(&cpu)
            .unwrap()
            .dequantize()
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        // Every row is one value: Q8_0 keeps it within the f16 rounding of its scale.
        common::assert_close(&got, &hf, 1e-3, 0.0, "Q8_0 rows");
    }
    assert_eq!(unpermute_order(8, 2).unwrap(), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    assert!(unpermute_order(6, 2).is_err());
}

/// Position just past tensor `name`'s name in the header.
fn info_at(bytes: &[u8], name: &str) -> usize {
    let needle = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len()
}

/// Position of metadata `key`'s value (past its type).
fn value_at(bytes: &[u8], key: &str) -> usize {
    info_at(bytes, key) + 4
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Opens a corrupted file and asserts a `Format` error whose message contains `needle`.
fn refused(case: &str, bytes: &[u8], needle: &str) {
    match open_bytes(&format!("{case}.gguf"), bytes) {
        Err(Error::Format { message, .. }) => {
            assert!(
                message.contains(needle),
                "{case}: message {message:?} lacks {needle:?}"
            )
        }
        Err(e) => panic!("{case}: expected Error::Format, got {e:?}"),
        Ok(f) => panic!("{case}: a corrupt file opened: {f:?}"),
    }
}

#[test]
fn corrupt_files_are_typed_errors() {
    let good = sample().to_bytes();
    assert!(open_bytes("good.gguf", &good).is_ok());
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    // Header fields: magic 0..4, version 4..8, tensor count 8..16, kv count 16..24, then the
    // first key's length at 24.
    refused("magic", &edit(&|b| b[0] = b'X'), "magic");
    refused("version", &edit(&|b| put_u32(b, 4, 1)), "version 1");
    refused(
        "version_future",
        &edit(&|b| put_u32(b, 4, 99)),
        "version 99",
    );
    refused(
        "tensor_count",
        &edit(&|b| put_u64(b, 8, u64::MAX)),
        "tensor count",
    );
    refused(
        "kv_count",
        &edit(&|b| put_u64(b, 16, 1 << 60)),
        "metadata count",
    );
    refused(
        "key_length",
        &edit(&|b| put_u64(b, 24, u64::MAX - 3)),
        "past the end",
    );
    // general.architecture's value: key (8 + 20 bytes) + type (4) then the string length.
    refused(
        "string_length",
        &edit(&|b| put_u64(b, 24 + 28 + 4, 1 << 40)),
        "past the end",
    );
    refused(
        "value_type",
        &edit(&|b| put_u32(b, 24 + 28, 77)),
        "value type 77",
    );
    // tokenizer.ggml.tokens: the array's element count.
    let arr = value_at(&good, "tokenizer.ggml.tokens") + 4;
    refused(
        "array_length",
        &edit(&|b| put_u64(b, arr, u64::MAX / 2)),
        "array length",
    );
    refused("array_nesting", &nested_arrays(), "nested deeper");
    // Tensor infos: after the name, n_dims (4), dims (8 each), type (4), offset (8).
    let q8 = info_at(&good, "q8");
    refused("n_dims", &edit(&|b| put_u32(b, q8, 9)), "at most 4");
    refused(
        "huge_dims",
        &edit(&|b| put_u64(b, q8 + 4 + 8, 1 << 40)),
        "past the end",
    );
    refused(
        "dims_overflow",
        &edit(&|b| {
            put_u64(b, q8 + 4, 1 << 40);
            put_u64(b, q8 + 12, 1 << 40);
        }),
        "overflows",
    );
    refused(
        "block_multiple",
        &edit(&|b| put_u64(b, q8 + 4, 48)),
        "block length",
    );
    refused(
        "unknown_type",
        &edit(&|b| put_u32(b, q8 + 4 + 16, 13)),
        "Q5_K",
    );
    refused(
        "unknown_type_id",
        &edit(&|b| put_u32(b, q8 + 4 + 16, 1000)),
        "unknown type 1000",
    );
    refused(
        "unaligned",
        &edit(&|b| put_u64(b, q8 + 4 + 16 + 4, 40)),
        "alignment",
    );
    refused(
        "offset_past_end",
        &edit(&|b| put_u64(b, q8 + 4 + 16 + 4, 1 << 50)),
        "past the end",
    );
    refused("truncated_data", &good[..good.len() - 10], "truncated");
    let dup = {
        let mut w = sample();
        w.add_tensor(
            "norm",
            &Tensor::zeros(&[32], DType::F32, &Device::cpu()).unwrap(),
        )
        .unwrap();
        w.to_bytes()
    };
    refused("duplicate_tensor", &dup, "appears twice");
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", GgufValue::U32(64));
    let mut bad_align = w.to_bytes();
    let at = value_at(&bad_align, "general.alignment");
    put_u32(&mut bad_align, at, 48);
    refused("alignment_value", &bad_align, "power of two");
    let mut w = GgufWriter::new();
    w.add_metadata("flag", GgufValue::Bool(true));
    let mut bad_bool = w.to_bytes();
    let at = value_at(&bad_bool, "flag");
    bad_bool[at] = 7;
    refused("bool", &bad_bool, "bool byte 7");
    refused("empty", &[], "the magic");
    assert!(matches!(
        GgufFile::open(tmp("missing_file.gguf").1),
        Err(Error::Io { .. })
    ));
}

/// An array nested 64 levels deep.
fn nested_arrays() -> Vec<u8> {
    let mut v = GgufValue::U8(1);
    for _ in 0..64 {
        v = GgufValue::Array(vec![v]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("deep", v);
    w.to_bytes()
}

/// Every prefix of a valid file and every single-byte change of its header is an error or a
/// valid file, never a panic.
#[test]
fn truncations_and_byte_flips_never_panic() {
    let good = sample().to_bytes();
    let (_dir, p) = tmp("fuzz.gguf");
    let header_end = info_at(&good, "half") + 4 + 16 + 4 + 8;
    for cut in 0..header_end + 8 {
        std::fs::write(&p, &good[..cut]).unwrap();
        assert!(GgufFile::open(&p).is_err(), "a file cut at {cut} opened");
    }
    for at in 0..header_end {
        for x in [0x01u8, 0x80, 0xFF] {
            let mut b = good.clone();
            b[at] ^= x;
            std::fs::write(&p, &b).unwrap();
            if let Ok(f) = GgufFile::open(&p) {
                // Whatever opened must load without panicking.
                for t in f.tensor_infos() {
                    let _ = f.load(&t.name, &Device::cpu(), DType::F32);
                }
            }
        }
    }
}

/// A file written by llama.cpp's Python `gguf` package (scripts/make_gguf_fixture.py): its
/// metadata and every tensor type read as gguf-py wrote them, wgtensor's Q8_0/Q4_0 quantizer
/// gives gguf-py's bytes, and Q4_K/Q6_K dequantize to gguf-py's values, on every device.
#[test]
fn a_file_from_the_python_gguf_package_reads_the_same() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/fixture.gguf");
    let f = GgufFile::open(&path).unwrap();
    let md = f.metadata();
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(md["llama.block_count"].as_u64(), Some(2));
    assert_eq!(md["llama.context_length"].as_u64(), Some(128));
    assert_eq!(md["llama.rope.freq_base"], GgufValue::F32(10000.0));
    assert_eq!(md["test.flag"], GgufValue::Bool(true));
    assert_eq!(md["test.name"].as_str(), Some("gguf-py fixture"));
    let floats: Vec<f64> = md["test.floats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(floats, vec![0.5, -1.25, 3.0]);
    let tokens: Vec<&str> = md["tokenizer.ggml.tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(tokens, vec!["<s>", "</s>", "hello", "wörld"]);
    let cpu = Device::cpu();
    let source = dense(f.load("source", &cpu, DType::F32).unwrap());
    assert_eq!(source.shape(), &[6, 64]);
    let src = source.to_vec::<f32>().unwrap();
    for device in common::devices() {
        let h = dense(f.load("dense.f16", &device, DType::F32).unwrap());
        let want: Vec<f32> = src.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
        assert_eq!(h.to_vec::<f32>().unwrap(), want, "F16 on {device}");
        let b = dense(f.load("dense.bf16", &device, DType::F32).unwrap());
        let want = dense(f.load("dense.bf16.expected", &device, DType::F32).unwrap());
        assert_eq!(
            b.to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "BF16 on {device}"
        );
        for (name, q) in [("q8_0", QType::Q8_0), ("q4_0", QType::Q4_0)] {
            let t = quant(f.load(name, &device, DType::F32).unwrap());
            let (_, file_bytes) = f.tensor_bytes(name).unwrap();
            let ours = QTensor::quantize(&source.to(&device).unwrap(), q).unwrap();
            assert_eq!(
                ours.to_ggml().unwrap(),
                file_bytes,
                "{name}: wgtensor's rounding is gguf-py's"
            );
            assert_eq!(t.to_ggml().unwrap(), file_bytes, "{name} on {device}");
        }
        for name in ["q4_k", "q6_k"] {
            let t = quant(f.load(name, &device, DType::F32).unwrap());
            let want = dense(
                f.load(&format!("{name}.expected"), &cpu, DType::F32)
                    .unwrap(),
            );
            assert_eq!(t.shape()[..], want.shape()[..], "{name}");
            let want = want.to_vec::<f32>().unwrap();
            let amax = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            let got = t.dequantize().unwrap().to_vec::<f32>().unwrap();
            common::assert_close(
                &got,
                &want,
                1e-6,
                1e-6 * amax,
                &format!("{name} on {device}"),
            );
        }
    }
}
