// SPDX-License-Identifier: Apache-2.0
//! Variables and values: numbers with k/m/g/t suffixes (powers of 1024, as in
//! Filebench), booleans, strings, and the random `cvar`s ([`Dist`]).

use std::collections::BTreeMap;

use crate::ast::Expr;
pub use crate::dist::Dist;
use crate::lexer::ESCAPED_DOLLAR;
use crate::rng::Rng;

/// A resolved value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A word or string as written (numbers are parsed on use).
    Text(String),
    /// A random variable: each draw is a new size.
    Random(Dist),
}

/// Parses `128k`, `1m`, `1.5g`, `4096`, `60`.
pub fn parse_number(s: &str) -> Option<f64> {
    let s = s.trim();
    let (digits, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1024.0),
        'm' | 'M' => (&s[..s.len() - 1], 1024.0 * 1024.0),
        'g' | 'G' => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0),
        't' | 'T' => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0 * 1024.0),
        _ => (s, 1.0),
    };
    let v: f64 = digits.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some(v * mult)
}

/// Parses a boolean: `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// The variable table. `-D` overrides are pinned: a later `set` of the same
/// variable in the file does not change them.
#[derive(Debug, Default, Clone)]
pub struct Vars {
    values: BTreeMap<String, Value>,
    pinned: BTreeMap<String, Value>,
}

impl Vars {
    /// Pins `name` to `value` (the `-D name=value` of the command line).
    pub fn pin(&mut self, name: &str, value: &str) {
        let name = name.trim_start_matches('$').to_string();
        self.pinned.insert(name, Value::Text(value.to_string()));
    }

    /// `set $name=…` (ignored for a pinned variable).
    pub fn set(&mut self, name: &str, value: Value) {
        if !self.pinned.contains_key(name) {
            self.values.insert(name.to_string(), value);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.pinned.get(name).or_else(|| self.values.get(name))
    }

    /// All variables with their current values (pins win), for the JSON result.
    pub fn all(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in self.values.iter().chain(self.pinned.iter()) {
            let text = match v {
                Value::Text(t) => t.clone(),
                Value::Random(d) => format!("{d:?}"),
            };
            out.insert(k.clone(), text);
        }
        out
    }

    /// Resolves an expression; `Err` is a message for the caller to place.
    pub fn eval(&self, e: &Expr) -> Result<Value, String> {
        match e {
            Expr::Word(w) => Ok(Value::Text(w.clone())),
            Expr::Str(s) => Ok(Value::Text(self.interpolate(s)?)),
            Expr::Var(v) => self
                .get(v)
                .cloned()
                .ok_or_else(|| format!("variable ${v} is not set")),
            Expr::Cvar { kind, params } => {
                let mut vals = Vec::with_capacity(params.len());
                for (k, v) in params {
                    vals.push((k.as_str(), self.number(v)?));
                }
                let get = |n: &str| vals.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
                Ok(Value::Random(Dist::build(kind, get)?))
            }
            Expr::Randvar { attrs, table } => {
                let mut kind = "uniform".to_string();
                let mut vals = Vec::with_capacity(attrs.len());
                for (k, v) in attrs {
                    match k.as_str() {
                        "type" => kind = self.text(v)?,
                        // Our generator is used (seeded by --seed).
                        "seed" | "randsrc" => {}
                        _ => vals.push((k.as_str(), self.number(v)?)),
                    }
                }
                let mut rows = Vec::with_capacity(table.len());
                for [p, lo, hi] in table {
                    rows.push([self.number(p)?, self.number(lo)?, self.number(hi)?]);
                }
                let get = |n: &str| vals.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
                Ok(Value::Random(crate::dist::randvar(&kind, get, &rows)?))
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.number(lhs)?, self.number(rhs)?);
                let v = match op {
                    '+' => a + b,
                    '-' => a - b,
                    '*' => a * b,
                    '/' | '%' if b == 0.0 => return Err(format!("{e}: division by zero")),
                    '/' => a / b,
                    _ => a % b,
                };
                if !v.is_finite() || v < 0.0 {
                    return Err(format!("{e} is {v}, not a size or count"));
                }
                // Whole results print as integers, as Filebench's do.
                Ok(Value::Text(if v.fract() == 0.0 && v < 1e18 {
                    format!("{}", v as u64)
                } else {
                    format!("{v}")
                }))
            }
        }
    }

    /// The text of an expression (string, word or variable).
    pub fn text(&self, e: &Expr) -> Result<String, String> {
        match self.eval(e)? {
            Value::Text(t) => Ok(t),
            Value::Random(_) => Err(format!(
                "{e} is a random variable, a fixed value is needed here"
            )),
        }
    }

    pub fn number(&self, e: &Expr) -> Result<f64, String> {
        let t = self.text(e)?;
        parse_number(&t).ok_or_else(|| format!("'{t}' is not a number"))
    }

    pub fn int(&self, e: &Expr) -> Result<u64, String> {
        Ok(self.number(e)?.round() as u64)
    }

    pub fn boolean(&self, e: &Expr) -> Result<bool, String> {
        let t = self.text(e)?;
        parse_bool(&t).ok_or_else(|| format!("'{t}' is not a boolean"))
    }

    /// Replaces `$name` (and `${name}`) in a quoted string.
    pub fn interpolate(&self, s: &str) -> Result<String, String> {
        self.interpolate_with(s, &mut |name| Err(format!("variable ${name} is not set")))
    }

    /// The text of a message (`echo`, `usage`): a variable that is not set
    /// reads as nothing, as Filebench prints such a message anyway; the
    /// names of those variables come back for a warning.
    pub fn message(&self, e: &Expr) -> Result<(String, Vec<String>), String> {
        let mut unset = Vec::new();
        let text = match e {
            Expr::Str(s) => self.interpolate_with(s, &mut |name| {
                unset.push(name.to_string());
                Ok(())
            })?,
            Expr::Var(v) if self.get(v).is_none() => {
                unset.push(v.clone());
                String::new()
            }
            other => self.text(other)?,
        };
        Ok((text, unset))
    }

    /// [`Vars::interpolate`], with `unset` deciding what a variable that is
    /// not set does (it reads as nothing when `unset` returns `Ok`).
    fn interpolate_with(
        &self,
        s: &str,
        unset: &mut dyn FnMut(&str) -> Result<(), String>,
    ) -> Result<String, String> {
        let mut out = String::new();
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '$' {
                let braced = chars.get(i + 1) == Some(&'{');
                let start = if braced { i + 2 } else { i + 1 };
                let mut j = start;
                while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                if j > start {
                    let name: String = chars[start..j].iter().collect();
                    match self.get(&name) {
                        Some(Value::Text(t)) => out.push_str(t),
                        Some(Value::Random(d)) => out.push_str(&format!("{d:?}")),
                        None => unset(&name)?,
                    }
                    i = if braced && chars.get(j) == Some(&'}') {
                        j + 1
                    } else {
                        j
                    };
                    continue;
                }
            }
            out.push(if c == ESCAPED_DOLLAR { '$' } else { c });
            i += 1;
        }
        Ok(out)
    }
}

impl Value {
    /// A size: fixed, or drawn from the variable's distribution.
    pub fn draw(&self, rng: &mut Rng) -> Result<u64, String> {
        match self {
            Value::Text(t) => parse_number(t)
                .map(|v| v.round() as u64)
                .ok_or_else(|| format!("'{t}' is not a number")),
            Value::Random(d) => Ok(d.sample(rng).round().max(0.0) as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_suffixes() {
        assert_eq!(parse_number("4k"), Some(4096.0));
        assert_eq!(parse_number("1m"), Some(1048576.0));
        assert_eq!(parse_number("2g"), Some(2.0 * 1073741824.0));
        assert_eq!(parse_number("1.5"), Some(1.5));
        assert_eq!(parse_number("x"), None);
        assert_eq!(parse_number("-1"), None);
    }

    #[test]
    fn pins_win_over_set() {
        let mut v = Vars::default();
        v.pin("nfiles", "10");
        v.set("nfiles", Value::Text("1000".into()));
        v.set("dir", Value::Text("/tmp".into()));
        assert_eq!(v.int(&Expr::Var("nfiles".into())), Ok(10));
        assert_eq!(
            v.interpolate("at $dir/${nfiles}x \u{1}y"),
            Ok("at /tmp/10x $y".into())
        );
        assert!(v.eval(&Expr::Var("nope".into())).is_err());
    }
}
