//! Autotuning: for each (kernel family, shape class) met on an adapter, the variants that fit
//! are timed on the adapter itself and the fastest is kept, in memory and in a JSON cache file
//! keyed by the adapter (name, vendor, device id, driver, backend) and the wgtensor version, so
//! later processes start with the answer.
//!
//! When: the first call of a class runs the heuristic pick at once (no cold-start search); the
//! second call of that class times every candidate (a warm-up and three runs each, waiting for
//! each) and uses the winner from then on. `WGTENSOR_AUTOTUNE=off` keeps the heuristic,
//! `force` ignores the cache file and retunes; `on` is the default. A missing, unwritable or
//! corrupt cache file is never an error: it is ignored with a `log` warning and rewritten.
//!
//! Determinism (the default): a family tunes only among the variants that compute the same
//! arithmetic in the same order as its heuristic's pick (`same bits`), so which variant runs, and
//! whatever the cache file says, never changes a result's bits. Reductions and row kernels have
//! one variant per order, so they keep the heuristic; matmul tunes among its k-ordered FMA
//! kernels. `WGTENSOR_NONDETERMINISTIC=1` or [`set_deterministic`]`(false)` lets every family
//! choose among all its variants (keys tagged [`ANY_ORDER`], so the two modes never share a
//! cache entry).
//!
//! A leaf: owns its maps and counters; the timing itself is done by the caller (`matmul.rs`).

use super::sync::lock;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// `WGTENSOR_AUTOTUNE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Off,
    On,
    Force,
}

/// A process-wide default set by the test harness (0: none, 1: off), used when
/// `WGTENSOR_AUTOTUNE` is unset: test binaries keep kernel choices fixed unless a test asks.
pub(crate) static DEFAULT_OFF: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub(crate) fn mode() -> Mode {
    if std::env::var_os("WGTENSOR_AUTOTUNE").is_none() && DEFAULT_OFF.load(Ordering::Relaxed) {
        return Mode::Off;
    }
    match std::env::var("WGTENSOR_AUTOTUNE").as_deref() {
        Ok("off") | Ok("0") => Mode::Off,
        Ok("force") => Mode::Force,
        Ok("on") | Ok("1") | Err(_) => Mode::On,
        Ok(other) => {
            log::warn!("wgtensor: WGTENSOR_AUTOTUNE={other:?} is not off, on or force; using on");
            Mode::On
        }
    }
}

/// The determinism setting: 0 unset (the environment decides), 1 deterministic, 2 not.
static DETERMINISTIC: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets (or with `None` clears, returning to `WGTENSOR_NONDETERMINISTIC`) the determinism mode.
pub(crate) fn set_deterministic(on: Option<bool>) {
    let v = match on {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    DETERMINISTIC.store(v, Ordering::Relaxed);
}

/// Whether kernel choices must keep results bit-identical: the setter's value, else true unless
/// `WGTENSOR_NONDETERMINISTIC` is `1` (or `true`).
pub(crate) fn deterministic() -> bool {
    match DETERMINISTIC.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => !matches!(
            std::env::var("WGTENSOR_NONDETERMINISTIC").as_deref(),
            Ok("1") | Ok("true")
        ),
    }
}

/// The revision of the kernel variants the tuner chooses among, part of the cache file's
/// adapter key: a release that adds a variant (or changes a heuristic) retunes instead of
/// keeping winners chosen without it. 2: matmul's `gemv_rows`.
const KERNEL_SET: u32 = 2;

/// Appended to a class's key when every variant may be chosen (non-deterministic mode).
pub(crate) const ANY_ORDER: &str = " any-order";

/// The tuner's key for `family` and `class`: tagged [`ANY_ORDER`] outside deterministic mode.
pub(crate) fn class_key(family: &str, class: &str) -> String {
    if deterministic() {
        format!("{family}/{class}")
    } else {
        format!("{family}/{class}{ANY_ORDER}")
    }
}

/// Where the cache lives: `WGTENSOR_CACHE_DIR`, else the platform's cache dir + `wgtensor`
/// (`$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS, `%LOCALAPPDATA%`
/// on Windows).
pub(crate) fn cache_file() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = env("WGTENSOR_CACHE_DIR").or_else(|| {
        let base = if cfg!(target_os = "macos") {
            env("HOME").map(|h| h.join("Library/Caches"))
        } else if cfg!(windows) {
            env("LOCALAPPDATA")
        } else {
            env("XDG_CACHE_HOME").or_else(|| env("HOME").map(|h| h.join(".cache")))
        };
        base.map(|b| b.join("wgtensor"))
    })?;
    Some(dir.join("autotune.json"))
}

/// Where a choice came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Heuristic,
    Tuned,
    Cache,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Heuristic => "heuristic",
            Source::Tuned => "tuned",
            Source::Cache => "cache",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub variant: String,
    pub source: Source,
    /// Milliseconds per run of each candidate (tuned choices only).
    pub timings_ms: Vec<(String, f64)>,
    /// Calls of this class so far (the second one tunes).
    pub calls: u64,
}

pub(crate) struct Tuner {
    /// `family/class` -> choice.
    choices: Mutex<HashMap<String, Choice>>,
    loaded: OnceLock<()>,
    /// The adapter's key in the cache file.
    adapter: String,
    /// Searches run in this process.
    pub searches: AtomicU64,
}

impl Tuner {
    pub(crate) fn new(info: &wgpu::AdapterInfo) -> Tuner {
        Tuner {
            choices: Mutex::default(),
            loaded: OnceLock::new(),
            adapter: format!(
                "{} | vendor {:#x} device {:#x} | {} {} | {:?} | wgtensor {} kernels {}",
                info.name,
                info.vendor,
                info.device,
                info.driver,
                info.driver_info,
                info.backend,
                env!("CARGO_PKG_VERSION"),
                KERNEL_SET
            ),
            searches: AtomicU64::new(0),
        }
    }

    /// Reads this adapter's entries from the cache file once (unless `force`).
    fn load(&self) {
        self.loaded.get_or_init(|| {
            if mode() == Mode::Force {
                return;
            }
            let Some(path) = cache_file() else { return };
            let Some(root) = read_cache(&path) else {
                return;
            };
            let Some(entries) = root
                .get("adapters")
                .and_then(|a| a.get(&self.adapter))
                .and_then(|a| a.as_object())
            else {
                return;
            };
            let mut choices = lock(&self.choices);
            for (key, v) in entries {
                if let Some(variant) = v.get("variant").and_then(|x| x.as_str()) {
                    choices.insert(
                        key.clone(),
                        Choice {
                            variant: variant.to_string(),
                            source: Source::Cache,
                            timings_ms: Vec::new(),
                            calls: 0,
                        },
                    );
                }
            }
        });
    }

    /// The choice for `key` (tuned or cached) and whether this call should tune it now: the
    /// second call of a class with only a heuristic answer.
    pub(crate) fn lookup(&self, key: &str) -> (Option<String>, bool) {
        let off = mode() == Mode::Off;
        if !off {
            self.load();
        }
        let mut choices = lock(&self.choices);
        let c = choices.entry(key.to_string()).or_insert_with(|| Choice {
            variant: String::new(),
            source: Source::Heuristic,
            timings_ms: Vec::new(),
            calls: 0,
        });
        c.calls += 1;
        if off {
            return (None, false);
        }
        match c.source {
            Source::Tuned | Source::Cache => (Some(c.variant.clone()), false),
            Source::Heuristic => (None, c.calls == 2),
        }
    }

    /// Notes the heuristic's pick (for the report) until a tuned one replaces it.
    pub(crate) fn note_heuristic(&self, key: &str, variant: &str) {
        if let Some(c) = lock(&self.choices).get_mut(key) {
            if c.source == Source::Heuristic {
                c.variant = variant.to_string();
            }
        }
    }

    /// Records a search's result and writes the cache file.
    pub(crate) fn record(&self, key: &str, variant: &str, timings_ms: Vec<(String, f64)>) {
        self.searches.fetch_add(1, Ordering::Relaxed);
        let calls = lock(&self.choices).get(key).map_or(0, |c| c.calls);
        lock(&self.choices).insert(
            key.to_string(),
            Choice {
                variant: variant.to_string(),
                source: Source::Tuned,
                timings_ms,
                calls,
            },
        );
        self.save();
    }

    /// Every choice, sorted by key.
    pub(crate) fn report(&self) -> Vec<(String, Choice)> {
        let mut v: Vec<(String, Choice)> = lock(&self.choices)
            .iter()
            .filter(|(_, c)| !c.variant.is_empty())
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Merges this adapter's tuned and cached entries into the cache file (write to a
    /// temporary file, then rename, so a reader never sees half a file).
    fn save(&self) {
        let Some(path) = cache_file() else { return };
        let mut root = read_cache(&path).unwrap_or_else(|| serde_json::json!({}));
        if !root.is_object() {
            root = serde_json::json!({});
        }
        root["format"] = serde_json::json!(1);
        if !root.get("adapters").is_some_and(|a| a.is_object()) {
            root["adapters"] = serde_json::json!({});
        }
        let mut mine = serde_json::Map::new();
        for (key, c) in lock(&self.choices).iter() {
            if matches!(c.source, Source::Tuned | Source::Cache) {
                let timings: serde_json::Map<String, serde_json::Value> = c
                    .timings_ms
                    .iter()
                    .map(|(k, t)| (k.clone(), serde_json::json!(t)))
                    .collect();
                mine.insert(
                    key.clone(),
                    serde_json::json!({ "variant": c.variant, "timings_ms": timings }),
                );
            }
        }
        root["adapters"][&self.adapter] = serde_json::Value::Object(mine);
        let text = match serde_json::to_string_pretty(&root) {
            Ok(t) => t,
            Err(e) => return log::warn!("wgtensor: autotune cache not written: {e}"),
        };
        let tmp = path.with_extension(format!("json.{}", std::process::id()));
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&tmp, text))
            .and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            log::warn!(
                "wgtensor: autotune cache {} not written ({e}); tuning results stay in memory",
                path.display()
            );
        }
    }
}

/// The cache file's JSON, or `None` (with a warning when it exists but cannot be used).
fn read_cache(path: &std::path::Path) -> Option<serde_json::Value> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!(
                "wgtensor: autotune cache {} unreadable ({e}); ignored",
                path.display()
            );
            return None;
        }
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v.is_object() => Some(v),
        _ => {
            log::warn!(
                "wgtensor: autotune cache {} is corrupt; ignored (rewritten after the next tuning)",
                path.display()
            );
            None
        }
    }
}

/// A search's winner and every candidate's time (ms).
pub(crate) type Found<K> = (K, Vec<(String, f64)>);

/// Forces (or with `None`, stops forcing) the variant of `all` that `name_of` calls `name`,
/// in a test's thread-local `forced` slot; false for an unknown name (the reduction and
/// row-kernel `force_variant`s).
pub(crate) fn force_named<T: Copy + 'static>(
    forced: &'static std::thread::LocalKey<std::cell::Cell<Option<T>>>,
    all: &[T],
    name_of: fn(T) -> &'static str,
    name: Option<&str>,
) -> bool {
    let chosen = match name {
        None => None,
        Some(n) => match all.iter().copied().find(|&v| name_of(v) == n) {
            Some(v) => Some(v),
            None => return false,
        },
    };
    forced.with(|c| c.set(chosen));
    true
}
