//! The examples' command lines (feature `models`, since `generate` and `make_model` need it):
//! `--help`, arguments that are not UTF-8 and unknown flags, run on the built binaries.

mod common;

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
