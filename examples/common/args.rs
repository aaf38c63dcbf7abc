//! The command lines of the model examples (`generate`, `embed`, `transcribe`, `make_model`),
//! shared through `#[path]`: arguments are read as `OsString`s, so one that is not UTF-8 where
//! text is needed is a message and exit code 2, never a panic; `--help` prints the usage on
//! stdout (exit code 0); a bad command line is a message and the usage on stderr (exit code 2);
//! any other error is one line on stderr (exit code 1).
#![allow(dead_code)]

use std::ffi::OsString;
use std::process::ExitCode;
use wgtensor::{DType, Device};

/// What the command line asks for.
pub enum Cli<A> {
    Run(A),
    /// `-h` / `--help`: the usage on stdout, exit 0.
    Help,
}

/// `v` as text, or the error naming `what`.
pub fn text(what: &str, v: OsString) -> Result<String, String> {
    v.into_string()
        .map_err(|v| format!("{what}: {v:?} is not valid UTF-8"))
}

/// The number `v` of `flag`.
pub fn num<T: std::str::FromStr>(flag: &str, v: OsString) -> Result<T, String> {
    let v = text(flag, v)?;
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

/// `--dtype`'s value: `f32` or `f16`.
pub fn dtype(flag: &str, v: OsString) -> Result<DType, String> {
    match text(flag, v)?.as_str() {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        other => Err(format!("{flag}: {other:?} is not f32 or f16")),
    }
}

/// The device `--device` names, else the best one.
pub fn device(name: Option<&str>) -> Result<Device, String> {
    match name {
        Some(d) => d.parse().map_err(|e: wgtensor::Error| e.to_string()),
        None => Ok(Device::best()),
    }
}

/// Walks the arguments after the program name: `on(flag, value)` applies one flag, taking its
/// value (when it has one) from `value()`, and returns `Ok(false)` for a flag it does not know
/// (an error naming it). `Ok(Cli::Help)` at `-h` / `--help`, else `Ok(Cli::Run(()))` once every
/// flag is applied.
pub fn read_flags(
    args: impl IntoIterator<Item = OsString>,
    mut on: impl FnMut(&str, &mut dyn FnMut() -> Result<OsString, String>) -> Result<bool, String>,
) -> Result<Cli<()>, String> {
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let flag = text("argument", flag)?;
        if flag == "-h" || flag == "--help" {
            return Ok(Cli::Help);
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        if !on(&flag, &mut value)? {
            return Err(format!("unknown argument {flag:?}"));
        }
    }
    Ok(Cli::Run(()))
}

/// An example's `main`: the command line read by `parse`, then `run`, with the exit codes
/// above. Mesa's device-select layer, which complains on machines without a display, is
/// silenced first.
pub fn main<A>(
    usage: &str,
    parse: impl FnOnce(std::env::ArgsOs) -> Result<Cli<A>, String>,
    run: impl FnOnce(A) -> Result<(), String>,
) -> ExitCode {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none()
        && std::env::var_os("NODEVICE_SELECT").is_none()
    {
        // SAFETY: the first statement of the example's `main`, before any other thread exists.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    let mut args = std::env::args_os();
    args.next();
    let args = match parse(args) {
        Ok(Cli::Run(args)) => args,
        Ok(Cli::Help) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
