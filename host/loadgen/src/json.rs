//! A small JSON writer (objects, arrays, strings, numbers, booleans, null),
//! enough for the result files; no external serializer.

use std::fmt::Write;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// null.
    Null,
    /// true / false.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float; NaN and infinities become null.
    Num(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, keys in insertion order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An empty object.
    pub fn obj() -> Json {
        Json::Obj(Vec::new())
    }

    /// Adds `key: value` to an object (builder style).
    ///
    /// # Panics
    /// When `self` is not an object.
    pub fn with(mut self, key: &str, value: impl Into<Json>) -> Json {
        match &mut self {
            Json::Obj(v) => v.push((key.to_string(), value.into())),
            _ => panic!("Json::with on a non-object"),
        }
        self
    }

    /// Serialises with two-space indentation and a final newline.
    pub fn pretty(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, 0);
        s.push('\n');
        s
    }

    fn write(&self, out: &mut String, indent: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Num(f) if f.is_finite() => {
                // Debug formatting keeps a decimal point and round-trips.
                let _ = write!(out, "{f:?}");
            }
            Json::Num(_) => out.push_str("null"),
            Json::Str(s) => escape(out, s),
            Json::Arr(v) if v.is_empty() => out.push_str("[]"),
            Json::Obj(v) if v.is_empty() => out.push_str("{}"),
            Json::Arr(v) => {
                out.push('[');
                for (i, x) in v.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    x.write(out, indent + 1);
                }
                out.push('\n');
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(v) => {
                out.push('{');
                for (i, (k, x)) in v.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    pad(out, indent + 1);
                    escape(out, k);
                    out.push_str(": ");
                    x.write(out, indent + 1);
                }
                out.push('\n');
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    for _ in 0..indent {
        out.push_str("  ");
    }
}

fn escape(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Json {
        i64::try_from(v).map_or(Json::Num(v as f64), Json::Int)
    }
}
impl From<u32> for Json {
    fn from(v: u32) -> Json {
        Json::Int(i64::from(v))
    }
}
impl From<usize> for Json {
    fn from(v: usize) -> Json {
        Json::from(v as u64)
    }
}
impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::Num(v)
    }
}
impl From<&str> for Json {
    fn from(v: &str) -> Json {
        Json::Str(v.to_string())
    }
}
impl From<String> for Json {
    fn from(v: String) -> Json {
        Json::Str(v)
    }
}
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}
impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(v: Vec<T>) -> Json {
        Json::Arr(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_strings() {
        let j = Json::from("a\"b\\c\nd\u{1}é");
        assert_eq!(j.pretty(), "\"a\\\"b\\\\c\\nd\\u0001é\"\n");
    }

    #[test]
    fn nests_and_indents() {
        let j = Json::obj()
            .with("n", 3u64)
            .with("x", 1.5)
            .with("whole", 2.0)
            .with("bad", f64::NAN)
            .with("none", None::<u64>)
            .with("ok", true)
            .with("list", vec![1u32, 2])
            .with("empty", Json::obj())
            .with("inner", Json::obj().with("k", "v"));
        let want = r#"{
  "n": 3,
  "x": 1.5,
  "whole": 2.0,
  "bad": null,
  "none": null,
  "ok": true,
  "list": [
    1,
    2
  ],
  "empty": {},
  "inner": {
    "k": "v"
  }
}
"#;
        assert_eq!(j.pretty(), want);
    }

    #[test]
    fn big_unsigned_and_tiny_floats() {
        assert_eq!(Json::from(u64::MAX).pretty(), "1.8446744073709552e19\n");
        assert_eq!(Json::from(1e-7).pretty(), "1e-7\n");
    }
}
