//! The examples' command lines (feature `models`, since `generate` and `make_model` need it):
//! `--help`, arguments that are not UTF-8 and unknown flags, run on the built binaries.

use crate::common;

use common::TempDir;
use std::path::{Path, PathBuf};

/// The directory cargo puts this build's examples in (`<target>/<profile>/examples`, beside the
/// `deps` directory this test runs from, so `CARGO_TARGET_DIR` and `--target` are followed),
/// after building `names` there with the cargo that runs this test.
fn built_examples(names: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    // The `debug` directory is the `dev` profile's (`test` builds there too).
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.args([
        "build",
        "--quiet",
        "--features",
        "models",
        "--profile",
        &profile,
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    for n in names {
        cmd.args(["--example", n]);
    }
    let status = cmd.status().expect("run cargo build for the examples");
    assert!(
        status.success(),
        "cargo build of the examples {names:?} failed"
    );
    profile_dir.join("examples")
}

/// the examples' command lines: `--help` prints the usage on stdout with exit code 0; an
/// argument that is not UTF-8 (as a flag or where text is needed) and an unknown flag are a
/// message with the usage on stderr and exit code 2, never a panic.
#[cfg(unix)]
#[test]
fn example_command_lines_give_help_and_report_bad_arguments() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let dir = built_examples(&["generate", "make_model"]);
    let bad = || OsString::from_vec(b"caf\xe9".to_vec());
    let tmp = TempDir::new("example_cli");
    let out_dir = tmp.join("model");
    // (example, arguments, the flag named in the message)
    let cases: Vec<(&str, Vec<OsString>, &str)> = vec![
        (
            "generate",
            vec![
                "--model".into(),
                out_dir.clone().into(),
                "--prompt".into(),
                bad(),
            ],
            "--prompt",
        ),
        ("generate", vec![bad()], "argument"),
        ("generate", vec!["--frobnicate".into()], "--frobnicate"),
        (
            "make_model",
            vec![
                "--out".into(),
                out_dir.clone().into(),
                "--preset".into(),
                bad(),
            ],
            "--preset",
        ),
        ("make_model", vec![bad()], "argument"),
        ("make_model", vec!["--frobnicate".into()], "--frobnicate"),
    ];
    for name in ["generate", "make_model"] {
        let o = std::process::Command::new(dir.join(name))
            .arg("--help")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{name} --help: {o:?}");
        assert!(
            stdout.starts_with(&format!("usage: {name} ")),
            "{name} --help: {stdout}"
        );
        assert!(o.stderr.is_empty(), "{name} --help wrote to stderr: {o:?}");
    }
    for (name, args, word) in cases {
        let o = std::process::Command::new(dir.join(name))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {stderr}");
        assert!(
            stderr.contains(word) && stderr.contains(&format!("usage: {name} ")),
            "{name} {args:?}: the message names neither {word:?} nor the usage: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{name} {args:?}: {stderr}");
        if args.iter().any(|a| a.to_str().is_none()) {
            assert!(
                stderr.contains("not valid UTF-8"),
                "{name} {args:?}: {stderr}"
            );
        }
    }
    assert!(
        !out_dir.exists(),
        "a refused command line wrote {}",
        out_dir.display()
    );
}

/// `generate --chat`: the prompt becomes a user turn of the model directory's chat template
/// and is encoded without added special tokens (the template wrote BOS: the count on stderr is
/// the template's text encoded plainly); without `--prompt`, each stdin line is a turn, the
/// second turn reusing the first's cache.
#[test]
fn generate_chat_uses_the_template_and_keeps_the_conversation() {
    use wgtensor::models::{ChatMessage, Tokenizer};
    let dir = built_examples(&["generate"]);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/llama");
    let tmp = TempDir::new("example_chat");
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).unwrap();
    }
    // Llama's post-processor, which adds BOS when special tokens are added, so that adding
    // them to the template's text (which starts with BOS) would show.
    let mut tj: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap())
            .unwrap();
    tj["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
    });
    std::fs::write(tmp.join("tokenizer.json"), tj.to_string()).unwrap();
    let template = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
    let config =
        serde_json::json!({"bos_token": "<s>", "eos_token": "</s>", "chat_template": template});
    std::fs::write(tmp.join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = Tokenizer::from_file(tmp.join("tokenizer.json")).unwrap();
    let text = tok
        .apply_chat_template(&[ChatMessage::user("Hello")], true)
        .unwrap();
    let n = tok.encode(&text, false).unwrap().len();
    assert_eq!(
        tok.encode(&text, true).unwrap().len(),
        n + 1,
        "BOS would be added twice"
    );
    let run = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut child = std::process::Command::new(dir.join("generate"))
            .arg("--model")
            .arg(tmp.path())
            .args(["--device", "cpu", "--max-new-tokens", "4"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        );
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        (out, err)
    };
    let (out, err) = run(&["--chat", "--prompt", "Hello", "--ids"], "");
    assert!(
        err.contains(&format!("chat: {n} prompt tokens, 0 of them cached")),
        "{err}"
    );
    assert_eq!(out.matches("prefill: ").count(), 1, "{out}");
    assert!(out.contains("ids: ["), "{out}");

    let (out, err) = run(&[], "Hello\nAnd again?\n");
    assert_eq!(out.matches("prefill: ").count(), 2, "{out}");
    let turns: Vec<&str> = err.lines().filter(|l| l.starts_with("chat: ")).collect();
    assert_eq!(turns.len(), 2, "{err}");
    assert!(turns[0].ends_with(" 0 of them cached"), "{err}");
    assert!(
        !turns[1].ends_with(" 0 of them cached"),
        "the second turn ran from the start: {err}"
    );
}

/// `make_model` writes a `tokenizer_config.json` with a chat template: `generate --chat` runs
/// on its output.
#[test]
fn make_model_output_chats() {
    let dir = built_examples(&["make_model", "generate"]);
    let tmp = TempDir::new("example_make_chat");
    let out = tmp.join("model");
    let o = std::process::Command::new(dir.join("make_model"))
        .arg("--out")
        .arg(&out)
        .args(["--preset", "tiny"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "make_model: {o:?}");
    assert!(out.join("tokenizer_config.json").is_file());
    let o = std::process::Command::new(dir.join("generate"))
        .arg("--model")
        .arg(&out)
        .args(["--device", "cpu", "--max-new-tokens", "3"])
        .args(["--chat", "--prompt", "Hello", "--ids"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "generate --chat: {stderr}");
    assert!(stderr.contains("chat: "), "{stderr}");
    assert!(stdout.contains("ids: ["), "{stdout}");
}

/// `embed --json` on the tiny BERT fixture: the dimension line names the hidden size, and the
/// last line is JSON holding one embedding of that dimension per text, each of unit length
/// (the fixture's pipeline normalizes).
#[test]
fn embed_json_last_line_parses() {
    let dir = built_examples(&["embed"]);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/models/bert");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    let dim = config["hidden_size"].as_u64().unwrap() as usize;
    let o = std::process::Command::new(dir.join("embed"))
        .arg("--model")
        .arg(&model)
        .args([
            "--device", "cpu", "--text", "a fox", "--text", "a dog", "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "embed: {o:?}");
    assert!(
        stdout.contains(&format!("embedding dimension {dim} ")),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    let rows = v["embeddings"].as_array().expect("embeddings");
    assert_eq!(rows.len(), 2, "{last}");
    for r in rows {
        let r: Vec<f64> = r
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(r.len(), dim);
        let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
    }
}
