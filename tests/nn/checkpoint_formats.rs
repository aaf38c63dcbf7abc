//! Checkpoints as they are published: BF16, F64, I64 and BOOL tensors (written with the
//! `safetensors` crate) convert on load with the documented rules on every device; an I64 value
//! outside i32 is an error naming the tensor and the value; `load_tensor` reads one tensor of a
//! memory-mapped file and no other bytes; sharded checkpoints load through their index; bad
//! shards fail before any weight changes.

use crate::common;

use common::{devices, values};
use safetensors::{tensor::TensorView, Dtype};
use std::io::Write;
use std::path::PathBuf;
use wgtensor::nn::{
    load_safetensors, load_sharded, load_tensor, save_safetensors, Linear, Module, ReLU, Sequential,
};
use wgtensor::{f16, DType, Device, Error};

/// A fresh path in the temp dir, unique per test and process.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("wgtensor_ckpt_{}_{name}", std::process::id()))
}

/// Writes `(name, dtype, shape, bytes)` tensors with the reference `safetensors` writer.
fn write_raw(path: &std::path::Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

const BF16_SRC: [f32; 5] = [1.5, -2.0, 3.140625, 1.0e-3, 65504.0 * 4.0];
const F64_SRC: [f64; 4] = [0.1, -1.0e10, 3.5, 1.0 / 3.0];

fn bf16_bytes() -> Vec<u8> {
    BF16_SRC
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
        .collect()
}

fn hub_file(name: &str) -> PathBuf {
    let p = temp(name);
    let i64s: Vec<u8> = [-5i64, 0, i64::from(i32::MAX), i64::from(i32::MIN)]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    write_raw(
        &p,
        &[
            ("w.bf16", Dtype::BF16, vec![5], bf16_bytes()),
            (
                "w.f64",
                Dtype::F64,
                vec![2, 2],
                F64_SRC.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
            ("ids", Dtype::I64, vec![4], i64s),
            ("mask", Dtype::BOOL, vec![3], vec![1, 0, 1]),
        ],
    );
    p
}

#[test]
fn bf16_f64_i64_bool_convert_on_every_device() {
    let p = hub_file("dtypes");
    let bf16_as_f32: Vec<f32> = BF16_SRC
        .iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect();
    let f64_as_f32: Vec<f32> = F64_SRC.iter().map(|&x| x as f32).collect();
    for dev in devices() {
        let all = load_safetensors(&p, &dev, None).unwrap();
        let get = |n: &str| all.iter().find(|(k, _)| k == n).unwrap().1.clone();
        let w = get("w.bf16");
        assert_eq!(
            (w.dtype(), w.shape(), w.device()),
            (DType::F32, &[5][..], &dev)
        );
        assert_eq!(values(&w), bf16_as_f32, "bf16 -> f32 is exact on {dev}");
        let w = get("w.f64");
        assert_eq!((w.dtype(), w.shape()), (DType::F32, &[2, 2][..]));
        assert_eq!(values(&w), f64_as_f32, "f64 -> f32 rounds once on {dev}");
        let ids = get("ids");
        assert_eq!(ids.dtype(), DType::I32);
        assert_eq!(
            ids.to_vec::<i32>().unwrap(),
            vec![-5, 0, i32::MAX, i32::MIN]
        );
        let mask = get("mask");
        assert_eq!(mask.dtype(), DType::U8);
        assert_eq!(mask.to_vec::<u8>().unwrap(), vec![1, 0, 1]);

        // Asked for f16: every float tensor becomes f16, rounded once from its source.
        let half = load_safetensors(&p, &dev, Some(DType::F16)).unwrap();
        let get = |n: &str| half.iter().find(|(k, _)| k == n).unwrap().1.clone();
        let w = get("w.bf16");
        assert_eq!(w.dtype(), DType::F16);
        let want: Vec<f16> = bf16_as_f32.iter().map(|&x| f16::from_f32(x)).collect();
        assert_eq!(w.to_vec::<f16>().unwrap(), want, "bf16 -> f16 on {dev}");
        assert!(want[4].is_infinite(), "2.6e5 overflows f16 as in PyTorch");
        let want: Vec<f16> = F64_SRC.iter().map(|&x| f16::from_f64(x)).collect();
        assert_eq!(get("w.f64").to_vec::<f16>().unwrap(), want);
        assert_eq!(get("ids").dtype(), DType::I32, "integers keep their dtype");
    }
    std::fs::remove_file(p).ok();
}

#[test]
fn i64_out_of_range_and_unsupported_dtypes_are_errors_naming_the_tensor() {
    let p = temp("i64_range");
    let bytes: Vec<u8> = [1i64, 2, 5_000_000_000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    write_raw(&p, &[("position_ids", Dtype::I64, vec![3], bytes)]);
    for dev in devices() {
        match load_safetensors(&p, &dev, None) {
            Err(Error::InvalidArgument { message, .. }) => {
                for part in ["\"position_ids\"", "5000000000", "index 2", "i32"] {
                    assert!(message.contains(part), "{part:?} missing from {message}");
                }
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    let q = temp("i16");
    write_raw(&q, &[("counts", Dtype::I16, vec![2], vec![1, 0, 2, 0])]);
    match load_safetensors(&q, &Device::cpu(), None) {
        Err(Error::Format { message, .. }) => {
            assert!(
                message.contains("\"counts\"") && message.contains("I16"),
                "{message}"
            )
        }
        other => panic!("expected Format, got {other:?}"),
    }
    std::fs::remove_file(p).ok();
    std::fs::remove_file(q).ok();
}

/// A safetensors file whose second tensor is 1 GiB of sparse (never written) bytes.
fn file_with_huge_tensor() -> PathBuf {
    let huge = 1usize << 30;
    let header = format!(
        r#"{{"small":{{"dtype":"F32","shape":[4],"data_offsets":[0,16]}},"huge":{{"dtype":"U8","shape":[{huge}],"data_offsets":[16,{}]}}}}"#,
        16 + huge
    );
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let p = temp("huge.safetensors");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&header).unwrap();
    for x in [1f32, 2.0, 3.0, 4.0] {
        f.write_all(&x.to_le_bytes()).unwrap();
    }
    f.set_len((8 + header.len() + 16 + huge) as u64).unwrap();
    p
}

#[test]
fn load_tensor_by_name_reads_only_that_tensor() {
    let p = file_with_huge_tensor();
    assert!(std::fs::metadata(&p).unwrap().len() > 1 << 30);
    for dev in devices() {
        let before = wgtensor::testing::safetensors_bytes_read();
        let small = load_tensor(&p, "small", &dev).unwrap();
        let read = wgtensor::testing::safetensors_bytes_read() - before;
        assert_eq!(
            read, 16,
            "only the 16 bytes of \"small\" are read, not the 1 GiB"
        );
        assert_eq!(small.device(), &dev);
        assert_eq!(values(&small), vec![1.0, 2.0, 3.0, 4.0]);
    }
    match load_tensor(&p, "big", &Device::cpu()) {
        Err(Error::InvalidArgument { message, .. }) => {
            assert!(
                message.contains("\"big\"") && message.contains("\"huge\""),
                "{message}"
            )
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // The dtype rules of load_safetensors apply to a single tensor too.
    let q = hub_file("by_name");
    let ids = load_tensor(&q, "ids", &Device::cpu()).unwrap();
    assert_eq!(
        ids.to_vec::<i32>().unwrap(),
        vec![-5, 0, i32::MAX, i32::MIN]
    );
    std::fs::remove_file(p).ok();
    std::fs::remove_file(q).ok();
}

fn model(dev: &Device) -> Sequential {
    Sequential::new()
        .add(Linear::new(3, 4, true, dev).unwrap())
        .add(ReLU)
        .add(Linear::new(4, 2, true, dev).unwrap())
}

/// Writes `model`'s parameters as two shards plus an index in a fresh directory.
fn shard(model: &Sequential, name: &str) -> PathBuf {
    let dir = temp(name);
    std::fs::create_dir_all(&dir).unwrap();
    let params = model.named_parameters();
    let (a, b) = params.split_at(2);
    let files = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    save_safetensors(dir.join(files[0]), a).unwrap();
    save_safetensors(dir.join(files[1]), b).unwrap();
    let map: serde_json::Map<String, serde_json::Value> = a
        .iter()
        .map(|(n, _)| (n.clone(), files[0].into()))
        .chain(b.iter().map(|(n, _)| (n.clone(), files[1].into())))
        .collect();
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    let path = dir.join("model.safetensors.index.json");
    std::fs::write(&path, index.to_string()).unwrap();
    path
}

#[test]
fn sharded_checkpoints_load_through_the_index() {
    let src = model(&Device::cpu());
    let index = shard(&src, "sharded");
    for dev in devices() {
        let all = load_sharded(&index, &dev, None).unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["0.bias", "0.weight", "2.bias", "2.weight"]);
        let mut m = model(&dev);
        m.load_weights(&index, &dev).unwrap();
        for ((n, a), (_, b)) in m.named_parameters().iter().zip(src.named_parameters()) {
            assert_eq!(a.device(), &dev);
            assert_eq!(values(a), values(&b), "{n} on {dev}");
        }
    }
    std::fs::remove_dir_all(index.parent().unwrap()).ok();
}

#[test]
fn bad_shards_fail_before_any_weight_changes() {
    let cpu = Device::cpu();
    let src = model(&cpu);
    let index = shard(&src, "bad_shards");
    let dir = index.parent().unwrap().to_path_buf();
    let second = dir.join("model-00002-of-00002.safetensors");
    let good = std::fs::read(&second).unwrap();
    for dev in devices() {
        let mut m = model(&dev);
        let before: Vec<Vec<f32>> = m.parameters().iter().map(values).collect();
        // A truncated second shard: the first shard is valid, yet nothing is assigned.
        std::fs::write(&second, &good[..good.len() - 5]).unwrap();
        match m.load_weights(&index, &dev) {
            Err(Error::Format { path, .. }) => assert!(path.contains("00002"), "{path}"),
            other => panic!("expected Format for the truncated shard, got {other:?}"),
        }
        // An index placing a tensor in a shard that lacks it.
        std::fs::write(&second, &good).unwrap();
        let text = std::fs::read_to_string(&index).unwrap();
        let wrong = dir.join("wrong.index.json");
        std::fs::write(
            &wrong,
            text.replace(
                "\"0.bias\":\"model-00001-of-00002.safetensors\"",
                "\"0.bias\":\"model-00002-of-00002.safetensors\"",
            ),
        )
        .unwrap();
        match m.load_weights(&wrong, &dev) {
            Err(Error::Format { message, .. }) => assert!(message.contains("\"0.bias\"")),
            other => panic!("expected Format for a misplaced tensor, got {other:?}"),
        }
        // A corrupt single file.
        let corrupt = dir.join("corrupt.safetensors");
        let mut bytes = good.clone();
        bytes[8] = b'[';
        std::fs::write(&corrupt, bytes).unwrap();
        assert!(matches!(
            m.load_weights(&corrupt, &dev),
            Err(Error::Format { .. })
        ));
        let after: Vec<Vec<f32>> = m.parameters().iter().map(values).collect();
        assert_eq!(before, after, "weights intact on {dev}");
    }
    match load_sharded(dir.join("nothing.index.json"), &cpu, None) {
        Err(Error::Io { .. }) => {}
        other => panic!("expected Io, got {other:?}"),
    }
    let no_map = dir.join("no_map.index.json");
    std::fs::write(&no_map, "{\"metadata\": {}}").unwrap();
    assert!(matches!(
        load_sharded(&no_map, &cpu, None),
        Err(Error::Format { .. })
    ));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bf16_model_from_the_hub_loads_into_an_f32_model() {
    // A model exported in bf16, as most Hub checkpoints are.
    let src = model(&Device::cpu());
    let params = src.named_parameters();
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = params
        .iter()
        .map(|(n, t)| {
            let b = values(t)
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect();
            (n.clone(), t.shape().to_vec(), b)
        })
        .collect();
    let p = temp("bf16_model.safetensors");
    let raw: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> = bytes
        .iter()
        .map(|(n, s, b)| (n.as_str(), Dtype::BF16, s.clone(), b.clone()))
        .collect();
    write_raw(&p, &raw);
    for dev in devices() {
        let mut m = model(&dev);
        m.load_weights(&p, &dev).unwrap();
        for ((n, a), (_, b)) in m.named_parameters().iter().zip(&params) {
            let want: Vec<f32> = values(b)
                .iter()
                .map(|&x| half::bf16::from_f32(x).to_f32())
                .collect();
            assert_eq!(a.dtype(), DType::F32);
            assert_eq!(values(a), want, "{n} on {dev}");
        }
    }
    std::fs::remove_file(p).ok();
}
