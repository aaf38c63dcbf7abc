//! safetensors weights: a file written by the Python `safetensors` package loads with the right
//! names, shapes, dtypes and values; a file wgtensor writes has the byte layout the format
//! specifies; f32 and f16 round trips onto every device; load_weights matches names and shapes;
//! missing/unexpected keys, wrong shapes and bad files are typed errors, never panics.

use crate::common;

use common::{devices, values, TempDir};
use std::path::{Path, PathBuf};
use wgtensor::nn::{load_safetensors, save_safetensors, Linear, Module, ReLU, Sequential};
use wgtensor::{f16, DType, Device, Error, Tensor};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny.safetensors")
}

/// A fresh path in a directory of the test's own, removed with the guard (pass or fail).
fn temp(name: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new("safetensors");
    let path = dir.join(format!("{name}.safetensors"));
    (dir, path)
}

#[test]
fn file_from_python_loads_with_names_shapes_dtypes_and_values() {
    for device in devices() {
        let loaded = load_safetensors(fixture(), &device, None).unwrap();
        let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
        // File order: the Python writer sorts by dtype alignment, then name.
        assert_eq!(
            names,
            [
                "encoder.layer.0.bias",
                "encoder.layer.0.weight",
                "ids",
                "half.scale"
            ]
        );
        let get = |n: &str| &loaded.iter().find(|(k, _)| k == n).unwrap().1;
        let w = get("encoder.layer.0.weight");
        assert_eq!((w.shape(), w.dtype()), (&[2usize, 3][..], DType::F32));
        assert_eq!(w.device(), &device);
        let want: Vec<f32> = (0..6).map(|i| 0.5 * i as f32 - 1.0).collect();
        assert_eq!(values(w), want);
        assert_eq!(values(get("encoder.layer.0.bias")), vec![0.25, -0.5, 1e-3]);
        let h = get("half.scale");
        assert_eq!((h.shape(), h.dtype()), (&[4usize][..], DType::F16));
        let hv: Vec<f32> = h
            .to_vec::<f16>()
            .unwrap()
            .into_iter()
            .map(f32::from)
            .collect();
        assert_eq!(hv, vec![1.0, -2.0, 0.5, 65504.0]);
        let ids = get("ids");
        assert_eq!((ids.shape(), ids.dtype()), (&[2usize, 2][..], DType::I32));
        assert_eq!(ids.to_vec::<i32>().unwrap(), vec![0, 7, -3, i32::MAX]);
        // Converted on load: floats to f16 / f32, integers untouched.
        let as_half = load_safetensors(fixture(), &device, Some(DType::F16)).unwrap();
        for (name, t) in &as_half {
            let want = if name == "ids" {
                DType::I32
            } else {
                DType::F16
            };
            assert_eq!(t.dtype(), want, "{name}");
        }
        let as_f32 = load_safetensors(fixture(), &device, Some(DType::F32)).unwrap();
        let scale = &as_f32.iter().find(|(k, _)| k == "half.scale").unwrap().1;
        assert_eq!(values(scale), vec![1.0, -2.0, 0.5, 65504.0]);
    }
    assert!(matches!(
        load_safetensors(fixture(), &Device::cpu(), Some(DType::U8)),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn written_file_has_the_specified_byte_layout() {
    let cpu = Device::cpu();
    let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], &[3], &cpu).unwrap();
    let b = Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-1.0)], &[2, 1], &cpu).unwrap();
    let c = Tensor::from_vec(vec![7u8, 8, 9], &[3], &cpu).unwrap();
    let d = Tensor::from_vec(vec![-5i32], &[1], &cpu).unwrap();
    let e = Tensor::from_vec(vec![u32::MAX, 1], &[2], &cpu).unwrap();
    // A transposed view is written as its packed row-major elements.
    let m = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], &cpu).unwrap();
    let tensors = vec![
        ("a".to_string(), a),
        ("b.half".to_string(), b),
        ("c".to_string(), c),
        ("d".to_string(), d),
        ("e".to_string(), e),
        ("m.t".to_string(), m.t().unwrap()),
    ];
    let (_tmp, path) = temp("layout");
    save_safetensors(&path, &tensors).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert!(8 + n <= bytes.len());
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let obj = header.as_object().unwrap();
    let expect: [(&str, &str, Vec<u64>, Vec<u8>); 6] = [
        (
            "a",
            "F32",
            vec![3],
            [1.5f32, -2.0, 3.25]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        (
            "b.half",
            "F16",
            vec![2, 1],
            [0.5f32, -1.0]
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        ("c", "U8", vec![3], vec![7, 8, 9]),
        ("d", "I32", vec![1], (-5i32).to_le_bytes().to_vec()),
        (
            "e",
            "U32",
            vec![2],
            [u32::MAX, 1].iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            "m.t",
            "F32",
            vec![3, 2],
            [1f32, 4.0, 2.0, 5.0, 3.0, 6.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
    ];
    assert_eq!(
        obj.keys().filter(|k| *k != "__metadata__").count(),
        expect.len()
    );
    let mut spans = Vec::new();
    for (name, dtype, shape, raw) in &expect {
        let entry = &obj[*name];
        assert_eq!(entry["dtype"], *dtype, "{name}");
        let got_shape: Vec<u64> = entry["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(&got_shape, shape, "{name}");
        let off = entry["data_offsets"].as_array().unwrap();
        let (s, e) = (
            off[0].as_u64().unwrap() as usize,
            off[1].as_u64().unwrap() as usize,
        );
        assert_eq!(&data[s..e], &raw[..], "{name}: little-endian element bytes");
        spans.push((s, e));
    }
    // Offsets tile the data section exactly: start at 0, contiguous, end at the file's end.
    spans.sort();
    assert_eq!(spans[0].0, 0);
    for w in spans.windows(2) {
        assert_eq!(w[0].1, w[1].0, "gap or overlap between tensors");
    }
    assert_eq!(spans.last().unwrap().1, data.len());
    // The header is padded with spaces only, and the Python-compatible reader agrees.
    let back = load_safetensors(&path, &cpu, None).unwrap();
    assert_eq!(back.len(), 6);
    std::fs::remove_file(&path).ok();
}

#[test]
fn round_trip_f32_and_f16_onto_every_device() {
    let cpu = Device::cpu();
    let xs = common::data(24, 5, 10.0);
    let halves: Vec<f16> = xs.iter().map(|&v| f16::from_f32(v)).collect();
    for from in devices() {
        let f = Tensor::from_vec(xs.clone(), &[2, 3, 4], &from).unwrap();
        let h = Tensor::from_vec(halves.clone(), &[24], &from).unwrap();
        let (_tmp, path) = temp(&format!("roundtrip_{}", from.to_string().replace(':', "_")));
        save_safetensors(&path, &[("f".into(), f), ("h".into(), h)]).unwrap();
        for to in devices() {
            let back = load_safetensors(&path, &to, None).unwrap();
            assert_eq!(back[0].0, "f");
            assert_eq!(back[0].1.device(), &to);
            assert_eq!(back[0].1.shape(), &[2, 3, 4]);
            assert_eq!(values(&back[0].1), xs, "{from} -> {to}");
            assert_eq!(back[1].1.dtype(), DType::F16);
            assert_eq!(back[1].1.to_vec::<f16>().unwrap(), halves);
            // f32 -> f16 on load rounds like `half` does.
            let conv = load_safetensors(&path, &to, Some(DType::F16)).unwrap();
            assert_eq!(conv[0].1.to_vec::<f16>().unwrap(), halves);
        }
        std::fs::remove_file(&path).ok();
    }
    // Repeated names are refused before anything is written.
    let t = Tensor::ones(&[1], DType::F32, &cpu).unwrap();
    let dup = save_safetensors(temp("dup").1, &[("x".into(), t.clone()), ("x".into(), t)]);
    assert!(matches!(dup, Err(Error::InvalidArgument { .. })));
}

fn model(device: &Device) -> Sequential {
    Sequential::new()
        .add(Linear::new(3, 4, true, device).unwrap())
        .add(ReLU)
        .add(Linear::new(4, 2, true, device).unwrap())
}

#[test]
fn load_weights_matches_names_and_shapes_on_every_device() {
    let cpu = Device::cpu();
    let source = model(&cpu);
    let (_tmp, path) = temp("weights");
    source.save_weights(&path).unwrap();
    let x = Tensor::from_vec(common::data(6, 9, 1.0), &[2, 3], &cpu).unwrap();
    let want = values(&source.forward(&x).unwrap());
    for device in devices() {
        let mut m = model(&cpu);
        m.load_weights(&path, &device).unwrap();
        for (name, p) in m.named_parameters() {
            assert_eq!(p.device(), &device, "{name}");
        }
        let y = m.forward(&x.to(&device).unwrap()).unwrap();
        common::assert_close(
            &values(&y),
            &want,
            1e-5,
            1e-6,
            &format!("reloaded on {device}"),
        );
    }
    // f16 weights load into an f32 model (converted on the host).
    let half: Vec<(String, Tensor)> = load_safetensors(&path, &cpu, Some(DType::F16)).unwrap();
    let (_htmp, hpath) = temp("weights_f16");
    save_safetensors(&hpath, &half).unwrap();
    let mut m = model(&cpu);
    m.load_weights(&hpath, &cpu).unwrap();
    assert_eq!(m.dtype(), Some(DType::F32));
    let y = values(&m.forward(&x).unwrap());
    common::assert_close(&y, &want, 1e-2, 1e-2, "from f16 weights");
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&hpath).ok();
}

fn expect_invalid(r: wgtensor::Result<()>, needles: &[&str]) {
    match r {
        Err(Error::InvalidArgument { op, message }) => {
            assert_eq!(op, "load_weights");
            for n in needles {
                assert!(message.contains(n), "{message:?} should mention {n:?}");
            }
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn missing_unexpected_and_misshapen_keys_are_named() {
    let cpu = Device::cpu();
    let t = |shape: &[usize]| Tensor::ones(shape, DType::F32, &cpu).unwrap();
    let full = vec![
        ("0.weight".to_string(), t(&[4, 3])),
        ("0.bias".to_string(), t(&[4])),
        ("2.weight".to_string(), t(&[2, 4])),
        ("2.bias".to_string(), t(&[2])),
    ];
    let tmp = TempDir::new("safetensors_keys");
    let write = |name: &str, v: &[(String, Tensor)]| {
        let p = tmp.join(format!("{name}.safetensors"));
        save_safetensors(&p, v).unwrap();
        p
    };
    let missing = write("missing", &full[..3]);
    let mut m = model(&cpu);
    let before: Vec<Vec<f32>> = m.parameters().iter().map(values).collect();
    expect_invalid(
        m.load_weights(&missing, &cpu),
        // The file's three keys are listed, not "no other keys" (matched ones included).
        &[
            "missing key \"2.bias\"",
            "[2]",
            "missing",
            "holds 3 tensor(s)",
            "\"0.bias\"",
            "\"0.weight\"",
            "\"2.weight\"",
        ],
    );
    let mut extra = full.clone();
    extra.push(("3.weight".to_string(), t(&[1])));
    let extra = write("extra", &extra);
    expect_invalid(
        m.load_weights(&extra, &cpu),
        &["unexpected key", "\"3.weight\""],
    );
    let mut wrong = full.clone();
    wrong[2].1 = t(&[4, 2]);
    let wrong = write("wrong", &wrong);
    expect_invalid(
        m.load_weights(&wrong, &cpu),
        &["\"2.weight\"", "[2, 4]", "[4, 2]", "wrong"],
    );
    let mut ints = full.clone();
    ints[1].1 = Tensor::from_vec(vec![1i32; 4], &[4], &cpu).unwrap();
    let ints = write("ints", &ints);
    expect_invalid(m.load_weights(&ints, &cpu), &["\"0.bias\"", "int32"]);
    // Nothing was replaced by the failed loads.
    let after: Vec<Vec<f32>> = m.parameters().iter().map(values).collect();
    assert_eq!(before, after);
    for p in [missing, extra, wrong, ints] {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn bad_files_are_typed_errors() {
    let cpu = Device::cpu();
    let good = std::fs::read(fixture()).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut huge_len = good.clone();
    huge_len[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let mut bad_json = good.clone();
    bad_json[8] = b'[';
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("short_length", good[..5].to_vec()),
        ("truncated_header", good[..8 + n / 2].to_vec()),
        ("truncated_data", good[..good.len() - 3].to_vec()),
        ("huge_header_length", huge_len),
        ("bad_json", bad_json),
        ("garbage", b"this is not a safetensors file at all".to_vec()),
    ];
    for (name, bytes) in cases {
        let (_tmp, p) = temp(name);
        std::fs::write(&p, &bytes).unwrap();
        match load_safetensors(&p, &cpu, None) {
            Err(Error::Format { path, .. }) => assert!(path.contains(name)),
            other => panic!("{name}: expected Error::Format, got {other:?}"),
        }
        let mut m = model(&cpu);
        assert!(
            matches!(m.load_weights(&p, &cpu), Err(Error::Format { .. })),
            "{name}"
        );
        std::fs::remove_file(&p).ok();
    }
    let (_tmp, nowhere) = temp("does_not_exist");
    assert!(matches!(
        load_safetensors(&nowhere, &cpu, None),
        Err(Error::Io { .. })
    ));
    let dir = std::env::temp_dir()
        .join("wgtensor_no_such_dir")
        .join("x.safetensors");
    let t = Tensor::ones(&[1], DType::F32, &cpu).unwrap();
    assert!(matches!(
        save_safetensors(&dir, &[("x".into(), t)]),
        Err(Error::Io { .. })
    ));
}

/// The files in `dir` whose names start with `prefix` (a save must leave no temporary behind).
fn leftovers(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix) && n.contains(".tmp-"))
        .collect()
}

/// A save that fails midway (a full disk, injected after half the bytes) leaves the previous
/// file bit-identical, through every writer: `save_safetensors`, `Module::save_weights` and
/// `save_checkpoint`; a reader holding the old file open keeps the old bytes after a good save.
#[test]
fn a_failed_save_leaves_the_previous_file_intact() {
    use std::io::Read;
    use wgtensor::optim::{save_checkpoint, Adam};
    for device in devices() {
        let (_tmp, path) = temp(&format!("atomic_{}", device.to_string().replace(':', "_")));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let dir = path.parent().unwrap().to_path_buf();
        let small = Tensor::from_vec(vec![1f32, 2.0], &[2], &device).unwrap();
        save_safetensors(&path, &[("old".into(), small)]).unwrap();
        let good = std::fs::read(&path).unwrap();
        let big = Tensor::ones(&[4096], DType::F32, &device).unwrap();
        let m = model(&device);
        let opt = Adam::new(1e-3);
        type Writer<'a> = Box<dyn Fn() -> wgtensor::Result<()> + 'a>;
        let writers: [(&str, Writer); 3] = [
            (
                "save_safetensors",
                Box::new(|| save_safetensors(&path, &[("new".into(), big.clone())])),
            ),
            ("save_weights", Box::new(|| m.save_weights(&path))),
            (
                "save_checkpoint",
                Box::new(|| save_checkpoint(&path, &m, &opt)),
            ),
        ];
        for (what, write) in &writers {
            wgtensor::testing::fail_next_save_after(100);
            let err = write().expect_err("the injected full disk must fail the save");
            assert!(
                matches!(&err, Error::Io { .. }) && err.to_string().contains("unchanged"),
                "{device} {what}: {err}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                good,
                "{device} {what}: file changed"
            );
            assert_eq!(leftovers(&dir, &format!(".{name}")), Vec::<String>::new());
        }
        // A good save replaces the file; a reader that opened the old one keeps its bytes.
        let mut reader = std::fs::File::open(&path).unwrap();
        save_safetensors(&path, &[("new".into(), big.clone())]).unwrap();
        let mut old = Vec::new();
        reader.read_to_end(&mut old).unwrap();
        assert_eq!(old, good, "{device}: an open reader saw the new bytes");
        let back = load_safetensors(&path, &Device::cpu(), None).unwrap();
        assert_eq!(back[0].0, "new");
        assert_eq!(leftovers(&dir, &format!(".{name}")), Vec::<String>::new());
        std::fs::remove_file(&path).ok();
    }
}

/// A real full disk, without mounting anything: a child process whose file-size limit
/// (`RLIMIT_FSIZE`, 64 KiB, set in the child only) makes the kernel refuse a write past it,
/// as a full filesystem does (`SIGXFSZ` ignored, so the write fails with `EFBIG`). A small good
/// file, then a 1.2 MB save over it: the save is an `Io` error, the old file is intact, no
/// temporary is left, and the child's directory is removed whatever happens.
#[test]
fn a_save_into_a_full_filesystem_keeps_the_previous_file() {
    common::run_child(FULL_DISK_CHILD, &[]);
}

const FULL_DISK_CHILD: &str = "safetensors::full_disk_child";

#[test]
fn full_disk_child() {
    if !common::is_child(FULL_DISK_CHILD) {
        return;
    }
    let tmp = TempDir::new("fullfs");
    let path = tmp.join("model.safetensors");
    let cpu = Device::cpu();
    let small = Tensor::from_vec(vec![3f32; 1000], &[1000], &cpu).unwrap();
    save_safetensors(&path, &[("w".into(), small)]).unwrap();
    let good = std::fs::read(&path).unwrap();
    // SAFETY: plain libc calls on this child process's own signal disposition and limit.
    unsafe {
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        let lim = libc::rlimit {
            rlim_cur: 64 << 10,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0, "setrlimit");
    }
    let big = Tensor::ones(&[300_000], DType::F32, &cpu).unwrap();
    let err = save_safetensors(&path, &[("w".into(), big)])
        .expect_err("1.2 MB cannot be written under a 64 KiB file-size limit");
    assert!(
        matches!(err, Error::Io { .. }) && err.to_string().contains("unchanged"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        good,
        "the previous file was damaged"
    );
    let files: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["model.safetensors"], "a temporary was left behind");
    drop(tmp);
    common::child_done(FULL_DISK_CHILD);
}

/// A target name of 255 bytes (NAME_MAX on Linux) saves as `std::fs::write` would: the
/// temporary's name stays short. A failed save under such a name leaves no temporary either.
#[test]
fn a_save_to_a_name_of_255_bytes_works() {
    let cpu = Device::cpu();
    let tmp = TempDir::new("longname");
    for len in [250, 255] {
        let name = format!("{}.safetensors", "w".repeat(len - ".safetensors".len()));
        assert_eq!(name.len(), len);
        let path = tmp.join(&name);
        let t = Tensor::from_vec(vec![1f32, 2.0], &[2], &cpu).unwrap();
        save_safetensors(&path, &[("x".into(), t.clone())])
            .unwrap_or_else(|e| panic!("a {len}-byte name: {e}"));
        let back = load_safetensors(&path, &cpu, None).unwrap();
        assert_eq!(values(&back[0].1), vec![1.0, 2.0]);
        wgtensor::testing::fail_next_save_after(4);
        assert!(save_safetensors(&path, &[("x".into(), t)]).is_err());
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            if len == 250 { 1 } else { 2 }
        );
    }
}
