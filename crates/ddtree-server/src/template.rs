//! Chat templates of Hugging Face checkpoints rendered with minijinja, with the shims those
//! templates need to render exactly as `apply_chat_template` does:
//!
//! * Jinja2 as transformers configures it: `trim_blocks` and `lstrip_blocks` on, the trailing
//!   newline dropped, undefined values lenient;
//! * Python string / dict / list methods (`split`, `rstrip`, `startswith`, `items`, …) from
//!   `minijinja-contrib`'s pycompat; slices with negative steps (`messages[::-1]`) and
//!   `namespace()` are native;
//! * `raise_exception(msg)` (a render error, answered as `400 template_error`);
//! * `tojson` as Python's `json.dumps(ensure_ascii=False)`: `", "` / `": "` separators, optional
//!   `indent`, and no HTML escaping (minijinja's own filter escapes `<`, `>`, `&`, `'`);
//! * `strftime_now(fmt)` (Llama-style templates), and `{% generation %}` markers removed.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value, syntax::SyntaxConfig};
use serde_json::Map;

use crate::error::ApiError;
use crate::validate::ChatMessage;

const NAME: &str = "chat";

/// A compiled chat template and the special tokens it may refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    special: Vec<(String, String)>,
}

impl ChatTemplate {
    /// Compiles `source`; `special` are the `(name, text)` special tokens templates read
    /// (`bos_token`, `eos_token`, `pad_token`).
    pub fn new(source: &str, special: Vec<(String, String)>) -> Result<Self, Error> {
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, strip_generation_tags(source))?;
        Ok(Self { env, special })
    }

    /// Renders the conversation; `kwargs` (`chat_template_kwargs`, e.g. `enable_thinking`) are
    /// template variables, overridden by `messages` and `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &Map<String, serde_json::Value>,
    ) -> Result<String, ApiError> {
        let mut ctx: Vec<(String, Value)> = self
            .special
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        ctx.extend(kwargs.iter().map(|(k, v)| (k.clone(), json_to_value(v))));
        let messages: Vec<Value> = messages.iter().map(message_value).collect();
        ctx.push(("messages".into(), Value::from(messages)));
        ctx.push(("add_generation_prompt".into(), Value::from(add_generation_prompt)));
        let template = self.env.get_template(NAME).map_err(|e| template_error(&e))?;
        template
            .render(Value::from_pairs(ctx))
            .map_err(|e| template_error(&e))
    }
}

fn template_error(e: &Error) -> ApiError {
    let detail = e.detail().map_or_else(|| e.to_string(), str::to_string);
    ApiError::invalid(
        "messages",
        "template_error",
        format!("the chat template rejected the conversation: {detail}"),
    )
}

fn message_value(m: &ChatMessage) -> Value {
    let mut pairs = vec![
        ("role", Value::from(m.role.as_str())),
        (
            "content",
            m.content.as_deref().map_or(Value::from(()), Value::from),
        ),
    ];
    if let Some(r) = &m.reasoning_content {
        pairs.push(("reasoning_content", Value::from(r.as_str())));
    }
    if let Some(n) = &m.name {
        pairs.push(("name", Value::from(n.as_str())));
    }
    Value::from_pairs(pairs)
}

/// JSON → template value, keeping key order.
pub fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| n.as_u64().map(Value::from))
            .unwrap_or_else(|| Value::from(n.as_f64().unwrap_or(f64::NAN))),
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => a.iter().map(json_to_value).collect(),
        serde_json::Value::Object(o) => {
            Value::from_pairs(o.iter().map(|(k, v)| (k.clone(), json_to_value(v))))
        }
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
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
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('B') => out.push_str(name),
            Some('b') => out.push_str(&name[..3]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem % 3600 / 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`.
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")?.or(indent) {
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
        None => None,
    };
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(v: &Value, indent: Option<usize>, level: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(v.clone()) {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                out.push_str(&python_float(f));
            }
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                write_json(item, indent, level + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, level);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                write_string(&key.to_string(), out);
                out.push_str(": ");
                write_json(&v.get_item(key)?, indent, level + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, level);
            }
            out.push('}');
        }
        _ => match v.as_str() {
            Some(s) => write_string(s, out),
            None => write_string(&v.to_string(), out),
        },
    }
    Ok(())
}

/// Python's float repr for the common cases (`1.0`, `0.5`, `1e-07`, `inf` → `Infinity`).
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f.fract() == 0.0 && f.abs() < 1e16 {
        return format!("{f:.1}");
    }
    let s = format!("{f}");
    if s.len() > 17 { format!("{f:e}") } else { s }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Removes `{% generation %}` / `{% endgeneration %}` markers (transformers' assistant-mask
/// extension), keeping what they enclose.
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start + 2..start + len];
        let word = tag.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        let keep = word != "generation" && word != "endgeneration";
        if keep {
            out.push_str(&rest[start..start + len + 2]);
        }
        rest = &rest[start + len + 2..];
        if !keep {
            // As `trim_blocks` would have removed the newline after the tag.
            rest = rest.strip_prefix('\n').unwrap_or(rest);
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, kwargs: serde_json::Value) -> Result<String, ApiError> {
        let t = ChatTemplate::new(src, vec![]).unwrap();
        let kwargs = kwargs.as_object().cloned().unwrap_or_default();
        t.render(&[], false, &kwargs)
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let got = render(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}",
            serde_json::json!({"x": {"a": [1, 2.5, true, null], "s": "<b> & 'q' “ü” \n"}}),
        )
        .unwrap();
        assert_eq!(
            got,
            "{\"a\": [1, 2.5, true, null], \"s\": \"<b> & 'q' “ü” \\n\"}|{\n  \"a\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"s\": \"<b> & 'q' “ü” \\n\"\n}"
        );
    }

    #[test]
    fn python_methods_negative_slices_and_namespace_work() {
        let src = "{% set ns = namespace(n=0) %}{% for m in xs[::-1] %}{% set ns.n = ns.n + 1 %}{{ m.strip().upper() }}{% endfor %}{{ ns.n }}{{ 'a,b'.split(',')[-1] }}";
        assert_eq!(
            render(src, serde_json::json!({"xs": [" a ", "b\n"]})).unwrap(),
            "BA2b"
        );
    }

    #[test]
    fn raise_exception_is_a_400_with_the_message() {
        let e = render(
            "{{ raise_exception('Roles must alternate') }}",
            serde_json::json!({}),
        )
        .unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.code, "template_error");
        assert!(e.message.contains("Roles must alternate"), "{}", e.message);
    }

    #[test]
    fn generation_markers_are_removed_and_blocks_trimmed() {
        let src = "{% for i in [1, 2] %}\n{% generation %}{{ i }}{% endgeneration %}\n{% endfor %}\n";
        assert_eq!(render(src, serde_json::json!({})).unwrap(), "12");
        let date = render("{{ strftime_now('%Y-%m-%d') }}", serde_json::json!({})).unwrap();
        assert_eq!(date.len(), 10);
        assert!(date.starts_with("20"), "{date}");
    }
}
