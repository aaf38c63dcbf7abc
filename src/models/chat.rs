//! Chat templates: the Jinja `chat_template` of a model's `tokenizer_config.json` (or of a GGUF
//! file's `tokenizer.chat_template`) rendered as transformers' `apply_chat_template` renders it,
//! through MiniJinja.
//!
//! transformers renders in a Jinja2 sandbox with `trim_blocks` and `lstrip_blocks` on, the
//! `loopcontrols` extension, a `raise_exception` function, a `strftime_now` function and its own
//! `tojson` filter; the same environment is built here, with minijinja-contrib's Python-method
//! compatibility for the `.strip()`, `.split()` and `.items()` real templates call.

use super::gguf::{GgufFile, GgufValue};
use crate::{Error, Result};
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One turn of a conversation: a `role` (`"system"`, `"user"`, `"assistant"`, or whatever else
/// the model's template knows) and its text, as transformers' `{"role": ..., "content": ...}`
/// dictionaries.
///
/// ```
/// use wgtensor::models::ChatMessage;
/// let chat = [ChatMessage::system("Be brief."), ChatMessage::user("Hi!")];
/// assert_eq!((chat[1].role.as_str(), chat[1].content.as_str()), ("user", "Hi!"));
/// assert_eq!(ChatMessage::new("tool", "42").role, "tool");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant`, ...
    pub role: String,
    /// What they say.
    pub content: String,
}

impl ChatMessage {
    /// A message of any role.
    ///
    /// ```
    /// let m = wgtensor::models::ChatMessage::new("user", "Hello");
    /// assert_eq!(m.content, "Hello");
    /// ```
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `system` message.
    ///
    /// ```
    /// assert_eq!(wgtensor::models::ChatMessage::system("Be brief.").role, "system");
    /// ```
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    /// A `user` message.
    ///
    /// ```
    /// assert_eq!(wgtensor::models::ChatMessage::user("Hi").role, "user");
    /// ```
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    /// An `assistant` message.
    ///
    /// ```
    /// assert_eq!(wgtensor::models::ChatMessage::assistant("Hello!").role, "assistant");
    /// ```
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// The special-token strings a template may name (`bos_token`, `eos_token`, ...), as
/// `tokenizer_config.json` gives them.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecialTokens(pub(crate) BTreeMap<&'static str, String>);

/// The names transformers passes to templates (its `special_tokens_map`).
const SPECIAL: [&str; 6] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
];

impl SpecialTokens {
    /// The special tokens of a `tokenizer_config.json`: each a string or an
    /// `{"content": ..., ...}` object (`AddedToken`); null or absent ones are left out, as
    /// transformers leaves them undefined in the template.
    pub(crate) fn from_config(v: &serde_json::Value) -> SpecialTokens {
        let mut m = BTreeMap::new();
        for key in SPECIAL {
            let s = match v.get(key) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(o @ serde_json::Value::Object(_)) => o
                    .get("content")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string),
                _ => None,
            };
            if let Some(s) = s {
                m.insert(key, s);
            }
        }
        SpecialTokens(m)
    }
}

/// A compiled chat template.
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`; a syntax error is MiniJinja's message.
    pub(crate) fn new(source: &str) -> std::result::Result<ChatTemplate, String> {
        let mut env = Environment::new();
        // transformers: `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| describe(&e))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
        })
    }

    /// The template's text.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` with transformers' variables: `messages`, `add_generation_prompt`,
    /// `tools` and `documents` (none), and the special tokens.
    pub(crate) fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tokens: &SpecialTokens,
    ) -> std::result::Result<String, String> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                let mut map = BTreeMap::new();
                map.insert("role".to_string(), Value::from(m.role.as_str()));
                map.insert("content".to_string(), Value::from(m.content.as_str()));
                Value::from(map)
            })
            .collect();
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        ctx.insert("messages".into(), Value::from(messages));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        for (k, v) in &tokens.0 {
            ctx.insert((*k).to_string(), Value::from(v.as_str()));
        }
        let t = self.env.get_template(NAME).map_err(|e| describe(&e))?;
        t.render(Value::from(ctx)).map_err(|e| describe(&e))
    }
}

/// MiniJinja's message with the errors it wraps (a `raise_exception` text included).
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let _ = write!(s, ": {inner}");
        src = inner.source();
    }
    s
}

/// transformers' `raise_exception(message)`: templates call it to refuse a conversation (roles
/// that do not alternate, a system message the model has no place for).
fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now(format)` (Llama 3.2's templates print today's date). The date is
/// UTC; `%d %m %Y %y %b %B %a %A %H %M %S %j %%` are understood, anything else is kept as is.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];

/// `format` for the UTC time `secs` after the Unix epoch.
pub(crate) fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][(month - 1) as usize];
    let yday = before + day + i64::from(leap && month > 2);
    let name = MONTHS[(month - 1) as usize];
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('d') => write!(out, "{day:02}"),
            Some('m') => write!(out, "{month:02}"),
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year.rem_euclid(100)),
            Some('b') => write!(out, "{}", &name[..3]),
            Some('B') => write!(out, "{name}"),
            Some('a') => write!(out, "{}", &weekday[..3]),
            Some('A') => write!(out, "{weekday}"),
            Some('H') => write!(out, "{:02}", tod / 3600),
            Some('M') => write!(out, "{:02}", tod / 60 % 60),
            Some('S') => write!(out, "{:02}", tod % 60),
            Some('j') => write!(out, "{yday:03}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// transformers' `tojson`: Python's `json.dumps(x, ensure_ascii=False, indent=indent)` (its
/// separators `", "` and `": "`, or `","` and newlines when indented), not MiniJinja's compact,
/// HTML-escaped form, so tool schemas print as the model saw them in training.
fn tojson(
    value: Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    dump(&value, indent, 0, &mut out)?;
    Ok(out)
}

/// Writes one item of a map or list for [`dump`].
type Item<'a> = dyn FnMut(&mut String, &Value) -> std::result::Result<(), minijinja::Error> + 'a;

fn dump(
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    // A map's keys or a list's items between `open` and `close`, each written by `item` on a
    // line of its own when indented; `{}` or `[]` when there are none.
    let container = |out: &mut String,
                     [open, close]: [char; 2],
                     items: Vec<Value>,
                     item: &mut Item|
     -> std::result::Result<(), minijinja::Error> {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            newline(out, depth + 1);
            item(out, x)?;
        }
        newline(out, depth);
        out.push(close);
        Ok(())
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                let _ = write!(out, "{i}");
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                // Python prints integral floats with ".0" and non-finite ones by name.
                let _ = match f {
                    f if f.is_nan() => write!(out, "NaN"),
                    f if f.is_infinite() => {
                        write!(out, "{}", if f > 0.0 { "Infinity" } else { "-Infinity" })
                    }
                    f if f.fract() == 0.0 && f.abs() < 1e16 => write!(out, "{f:.1}"),
                    f => write!(out, "{f}"),
                };
            }
        }
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            out.push_str(&serde_json::to_string(s).unwrap_or_default());
        }
        ValueKind::Map => container(out, ['{', '}'], v.try_iter()?.collect(), &mut |out, k| {
            let key = k.as_str().map_or_else(|| k.to_string(), str::to_string);
            out.push_str(&serde_json::to_string(&key).unwrap_or_default());
            out.push_str(": ");
            dump(&v.get_item(k)?, indent, depth + 1, out)
        })?,
        ValueKind::Seq | ValueKind::Iterable => {
            container(out, ['[', ']'], v.try_iter()?.collect(), &mut |out, x| {
                dump(x, indent, depth + 1, out)
            })?
        }
        _ => out.push_str(&serde_json::to_string(&v.to_string()).unwrap_or_default()),
    }
    Ok(())
}

/// The template and special tokens of `path`: a `.gguf` file's metadata, a `.jinja` file's
/// text, or a `tokenizer_config.json`.
pub(crate) fn read_template_file(path: &Path) -> Result<(Option<String>, SpecialTokens)> {
    let op = "Tokenizer::load_chat_template";
    let format = |message: String| Error::Format {
        op,
        path: path.display().to_string(),
        message,
    };
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("gguf") {
        let file = GgufFile::open(path)?;
        let md = file.metadata();
        let template = md
            .get("tokenizer.chat_template")
            .and_then(GgufValue::as_str)
            .map(str::to_string);
        // llama.cpp keeps the vocabulary, not the token strings' roles: BOS and EOS are ids.
        let tokens = md
            .get("tokenizer.ggml.tokens")
            .and_then(GgufValue::as_array);
        let mut special = SpecialTokens::default();
        for (name, key) in [
            ("bos_token", "tokenizer.ggml.bos_token_id"),
            ("eos_token", "tokenizer.ggml.eos_token_id"),
        ] {
            let id = md.get(key).and_then(GgufValue::as_u64);
            let text = id.and_then(|i| tokens?.get(usize::try_from(i).ok()?)?.as_str());
            if let Some(t) = text {
                special.0.insert(name, t.to_string());
            }
        }
        return Ok((template, special));
    }
    let bytes = std::fs::read(path).map_err(super::config::io_error(op, path))?;
    let text = String::from_utf8(bytes).map_err(|e| format(format!("not UTF-8: {e}")))?;
    if ext.eq_ignore_ascii_case("jinja") {
        return Ok((Some(text), SpecialTokens::default()));
    }
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let template = match v.get("chat_template") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        // transformers' named templates: [{"name": "default", "template": ...}, ...].
        Some(serde_json::Value::Array(list)) => {
            let named = |n: &str| {
                list.iter()
                    .find(|e| e.get("name").and_then(serde_json::Value::as_str) == Some(n))
            };
            let t = named("default").ok_or_else(|| {
                format(
                    "chat_template is a list of named templates without a \"default\" one".into(),
                )
            })?;
            Some(
                t.get("template")
                    .and_then(serde_json::Value::as_str)
                    .ok_or_else(|| {
                        format("the \"default\" chat_template has no template text".into())
                    })?
                    .to_string(),
            )
        }
        Some(other) => {
            return Err(format(format!(
                "chat_template must be a string or a list of named templates, got {other}"
            )))
        }
    };
    Ok((template, SpecialTokens::from_config(&v)))
}

/// The error of a tokenizer without a template.
pub(crate) fn missing(op: &'static str) -> Error {
    Error::InvalidArgument {
        op,
        message: "this tokenizer has no chat template: none was found in tokenizer_config.json \
                  or chat_template.jinja beside tokenizer.json; load one with \
                  Tokenizer::load_chat_template (a tokenizer_config.json, a .jinja file or the \
                  model's .gguf file) or set one with Tokenizer::set_chat_template"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_utc_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday, day 208 of a leap year.
        let t = 1_721_999_109;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %j %H:%M:%S %y %m %%", t),
            "Friday July 208 13:05:09 24 07 %"
        );
        assert_eq!(strftime("%d %b %Y", 0), "01 Jan 1970");
    }

    #[test]
    fn tojson_prints_as_python_json_dumps() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}").unwrap();
        let env = &t.env;
        let out = env
            .get_template(NAME)
            .unwrap()
            .render(minijinja::context! { x => Value::from_iter([Value::from(1), Value::from("é\n"), Value::from(1.5)]) })
            .unwrap();
        assert_eq!(out, "[1, \"é\\n\", 1.5]|[\n  1,\n  \"é\\n\",\n  1.5\n]");
    }
}
