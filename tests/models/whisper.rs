//! Whisper against transformers: the tiny random `whisper` directory, the log-mel features and
//! the greedy ids written by `scripts/make_whisper_fixtures.py`. The features of a chirp equal
//! `WhisperFeatureExtractor`'s (80 and 128 mels; read from 16-bit and float WAV files at 8, 16,
//! 22.05, 44.1 and 48 kHz, two stereo, and resampled); the ids equal
//! `WhisperForConditionalGeneration.generate`'s for a 7-s and a 45-s signal (two 30-s windows)
//! and for each way a generation config sets the prompt (language and task, the older
//! `forced_decoder_ids`, language detection). Runs on the CPU and on every adapter.

use crate::common;

use common::{assert_close, devices, TempDir};
use serde_json::{json, Value};
use std::f64::consts::PI;
use std::path::{Path, PathBuf};
use wgtensor::models::{read_wav, LogMel, Whisper};
use wgtensor::{DType, Device, Error};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/whisper")
        .join(name)
}

fn expected() -> Value {
    let text = std::fs::read_to_string(data("expected.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// The script's `chirp`: 100 Hz to 3 kHz over 2 s, 50-ms fades.
fn chirp(sr: u32) -> Vec<f64> {
    let (seconds, f0, f1) = (2.0, 100.0, 3000.0);
    let n = (seconds * sr as f64).round() as usize;
    let k = (f1 - f0) / seconds;
    (0..n)
        .map(|i| {
            let t = i as f64 / sr as f64;
            let x = 0.5 * (2.0 * PI * (f0 * t + 0.5 * k * t * t)).sin();
            let fade = (t.min(seconds - t) / 0.05).min(1.0);
            x * (0.5 - 0.5 * (PI * fade).cos())
        })
        .collect()
}

/// The script's `signal`: gliding tones and pseudo-noise at 16 kHz.
fn signal(seconds: f64) -> Vec<f32> {
    let n = (seconds * 16000.0) as usize;
    (0..n)
        .map(|i| {
            let (i, t) = (i as f64, i as f64 / 16000.0);
            let seg = (t / 1.3).floor();
            let f = 200.0 + 150.0 * (seg * 7.0).rem_euclid(11.0);
            let x = 0.3 * (2.0 * PI * f * t).sin()
                + 0.2 * (2.0 * PI * (0.5 * f + 40.0 * seg) * t * 1.5).sin();
            let noise = (i * 12.9898 + 78.233).sin() * 43758.5453;
            (x + 0.05 * (noise - noise.floor() - 0.5)) as f32
        })
        .collect()
}

fn reference(mels: usize) -> (Vec<f32>, usize, f32) {
    let e = &expected()["features"][mels.to_string()];
    let frames = e["frames"].as_u64().unwrap() as usize;
    let bytes = std::fs::read(data(&format!("features_{mels}.bin"))).expect("fixture");
    let v = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (v, frames, e["floor"].as_f64().unwrap() as f32)
}

/// A preprocessor config of `mels` bins in `dir`.
fn log_mel(mels: usize, dir: &TempDir) -> LogMel {
    let text = std::fs::read_to_string(data("tiny/preprocessor_config.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["feature_size"] = json!(mels);
    let p = dir.join(format!("pre{mels}.json"));
    std::fs::write(&p, v.to_string()).unwrap();
    LogMel::from_file(&p).expect("preprocessor config")
}

/// Compares features `[mels, 3000]` with the reference: the stored frames elementwise, the rest
/// with the padding floor.
fn check_features(got: &[f32], mels: usize, atol: f32, ctx: &str) {
    let (want, frames, floor) = reference(mels);
    assert_eq!(got.len(), mels * 3000, "{ctx}: shape");
    let head: Vec<f32> = got
        .chunks_exact(3000)
        .flat_map(|row| row[..frames].to_vec())
        .collect();
    let (worst, at) = head
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .zip(0..)
        .fold((0f32, 0), |m, (e, i)| if e > m.0 { (e, i) } else { m });
    eprintln!(
        "{ctx}: largest difference {worst:.2e} (where the extractor gives {}; its floor {floor}, peak {})",
        want[at],
        want.iter().fold(f32::MIN, |a, &b| a.max(b))
    );
    assert_close(&head, &want, 0.0, atol, ctx);
    let tail: Vec<f32> = got
        .chunks_exact(3000)
        .flat_map(|row| row[frames..].to_vec())
        .collect();
    assert_close(
        &tail,
        &vec![floor; tail.len()],
        0.0,
        atol,
        &format!("{ctx} (padding)"),
    );
}

#[test]
fn features_equal_the_extractor_at_16k() {
    let tmp = TempDir::new("whisper-features");
    let x: Vec<f32> = chirp(16000).iter().map(|&v| v as f32).collect();
    for mels in [80, 128] {
        let mel = log_mel(mels, &tmp);
        assert_eq!((mel.n_mels(), mel.frames()), (mels, 3000));
        for d in devices() {
            let f = mel.features(&x, &d).expect("features");
            assert_eq!(f.shape(), &[mels, 3000]);
            assert_eq!(f.device(), &d);
            check_features(
                &f.to_vec::<f32>().unwrap(),
                mels,
                1e-4,
                &format!("{mels} mels on {d}"),
            );
        }
    }
}

fn write_wav(path: &Path, rate: u32, channels: u16, float: bool, x: &[f64]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: if float { 32 } else { 16 },
        sample_format: if float {
            hound::SampleFormat::Float
        } else {
            hound::SampleFormat::Int
        },
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &v in x {
        for c in 0..channels {
            // Stereo: the channels differ, their mean is the signal.
            let v = if channels == 2 {
                v * (0.5 + c as f64)
            } else {
                v
            };
            if float {
                w.write_sample(v as f32).unwrap();
            } else {
                w.write_sample((v * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
                    .unwrap();
            }
        }
    }
    w.finalize().unwrap();
}

/// WAV files at 8, 16, 22.05, 44.1 and 48 kHz, 16-bit and float, mono and stereo, read, mixed
/// down, resampled to 16 kHz: the features stay within `atol` of the extractor's for the chirp
/// computed at 16 kHz. Float files reach 1e-4 at every rate (the resampler keeps the chirp's
/// phase to 1e-7); 16-bit files are held to 1e-2, their rounding noise being what differs.
#[test]
fn features_of_wav_files_at_any_rate() {
    let tmp = TempDir::new("whisper-wav");
    let mel = log_mel(80, &tmp);
    // (rate, channels, float, tolerance reached)
    for (rate, channels, float, atol) in [
        (16000, 1, false, 1e-2),
        (16000, 2, true, 1e-4),
        (8000, 1, false, 1e-2),
        (8000, 1, true, 1e-4),
        (44100, 2, true, 1e-4),
        (44100, 1, false, 1e-2),
        (48000, 1, true, 1e-4),
        (22050, 1, true, 1e-4),
    ] {
        let path = tmp.join(format!("chirp-{rate}-{channels}-{float}.wav"));
        write_wav(&path, rate, channels, float, &chirp(rate));
        let x = read_wav(&path, 16000).expect("read_wav");
        assert_eq!(x.len(), 32000, "{rate} Hz: 2 s at 16 kHz");
        for d in devices() {
            let f = mel.features(&x, &d).unwrap().to_vec::<f32>().unwrap();
            let ctx = format!("{rate} Hz, {channels} ch, float {float} on {d}");
            check_features(&f, 80, atol, &ctx);
        }
    }
}

/// The tiny model's directory with `generation_config.json` set for `variant` (the script's
/// `generation_config(variant)`).
fn model_dir(variant: &str, tmp: &TempDir) -> PathBuf {
    if variant == "language" {
        return data("tiny");
    }
    let dir = tmp.join(variant);
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(data("tiny")).unwrap() {
        let p = f.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let gp = dir.join("generation_config.json");
    let mut g: Value = serde_json::from_str(&std::fs::read_to_string(&gp).unwrap()).unwrap();
    let o = g.as_object_mut().unwrap();
    o.remove("language");
    o.remove("task");
    match variant {
        "forced" => {
            o.insert(
                "forced_decoder_ids".into(),
                json!([[1, 83], [2, 84], [3, 89]]),
            );
        }
        "detect" => {
            o.insert("task".into(), json!("transcribe"));
        }
        "eos" => {
            o.insert("language".into(), json!("<|en|>"));
            o.insert("task".into(), json!("transcribe"));
            o.insert("eos_token_id".into(), json!(45));
        }
        _ => unreachable!(),
    }
    std::fs::write(&gp, g.to_string()).unwrap();
    dir
}

fn check_ids(name: &str, variant: &str, devices: &[Device]) {
    let e = expected();
    let s = &e["signals"][name];
    let want = &s["variants"][variant];
    let windows: Vec<Vec<u32>> = want["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            w.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    let x = signal(s["seconds"].as_f64().unwrap());
    let tmp = TempDir::new("whisper-ids");
    let dir = model_dir(variant, &tmp);
    for d in devices {
        let w = Whisper::load(&dir, d, DType::F32).expect("load");
        let t = w.transcribe(&x).expect("transcribe");
        assert_eq!(t.windows, windows, "{name} {variant} on {d}");
        let ids: Vec<u32> = want["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(t.ids, ids, "{name} {variant} on {d}");
        assert_eq!(
            t.text,
            want["text"].as_str().unwrap(),
            "{name} {variant} on {d}"
        );
    }
}

#[test]
fn greedy_ids_equal_generate_short() {
    check_ids("short", "language", &devices());
}

#[test]
fn greedy_ids_equal_generate_longer_than_30s() {
    check_ids("long", "language", &devices());
}

#[test]
fn prompt_from_forced_decoder_ids() {
    check_ids("short", "forced", &[Device::cpu()]);
}

/// End of text stops decoding (and is kept in the window, left out of `ids`).
#[test]
fn decoding_stops_at_end_of_text() {
    check_ids("short", "eos", &devices());
}

#[test]
fn prompt_with_detected_language() {
    check_ids("short", "detect", &[Device::cpu()]);
}

fn format_message(r: wgtensor::Result<Whisper>) -> String {
    match r {
        Err(Error::Format { message, .. }) => message,
        Err(e) => panic!("expected Error::Format, got {e}"),
        Ok(_) => panic!("expected Error::Format, got a model"),
    }
}

/// Unknown architectures, missing config fields and missing tensors are `Error::Format`
/// naming them.
#[test]
fn bad_directories_are_format_errors() {
    let tmp = TempDir::new("whisper-bad");
    let edit = |name: &str, file: &str, f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let dir = tmp.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(data("tiny")).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
        let p = dir.join(file);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(v.as_object_mut().unwrap());
        std::fs::write(&p, v.to_string()).unwrap();
        Whisper::load(&dir, &Device::cpu(), DType::F32)
    };
    let m = format_message(edit("arch", "config.json", &|o| {
        o.insert("model_type".into(), json!("wav2vec2"));
    }));
    assert!(m.contains("wav2vec2"), "{m}");
    let m = format_message(edit("dmodel", "config.json", &|o| {
        o.remove("d_model");
    }));
    assert!(m.contains("d_model"), "{m}");
    let m = format_message(edit("mels", "preprocessor_config.json", &|o| {
        o.remove("n_fft");
    }));
    assert!(m.contains("n_fft"), "{m}");
    let m = format_message(edit("lang", "generation_config.json", &|o| {
        o.insert("language".into(), json!("xx"));
    }));
    assert!(m.contains("xx"), "{m}");
    let m = format_message(edit("layers", "config.json", &|o| {
        o.insert("decoder_layers".into(), json!(3));
    }));
    assert!(m.contains("decoder.layers.2"), "{m}");
}
