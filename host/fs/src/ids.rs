// SPDX-License-Identifier: Apache-2.0
//! UID and GID translation between guest and host (`--translate-uid`,
//! `--translate-gid`, virtiofsd's forms): done by the FUSE layer on every
//! request's caller IDs and SETATTR owner (guest to host) and on every
//! attribute it replies with (host to guest). The two directions are
//! independent; an ID no rule covers stays as it is.

use std::fmt;

/// One rule, as given on the command line (the fields are the rule's
/// numbers, in its order).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `guest:FROM:TO:COUNT`: guest FROM.. are host TO.. (guest to host).
    Guest { from: u32, to: u32, count: u32 },
    /// `host:FROM:TO:COUNT`: host FROM.. are guest TO.. (host to guest).
    Host { from: u32, to: u32, count: u32 },
    /// `squash-guest:FROM:TO:COUNT`: guest FROM.. all become host TO.
    SquashGuest { from: u32, to: u32, count: u32 },
    /// `squash-host:FROM:TO:COUNT`: host FROM.. all become guest TO.
    SquashHost { from: u32, to: u32, count: u32 },
    /// `forbid-guest:FROM:COUNT`: the guest may not create files owned by,
    /// or give files to, these IDs (EPERM).
    ForbidGuest { from: u32, count: u32 },
    /// `map:GUEST:HOST:COUNT`: both directions, 1:1.
    Map { guest: u32, host: u32, count: u32 },
}

/// Why a rule does not parse, or rules clash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Not `TYPE:N:N[:N]`.
    #[error("`{0}`: expected TYPE:FROM:TO:COUNT (TYPE guest, host, squash-guest, squash-host, map) or forbid-guest:FROM:COUNT")]
    Form(String),
    /// A count of 0, or a range past the largest ID.
    #[error("`{0}`: empty range, or past the largest ID")]
    Range(String),
    /// Two rules translate the same IDs in the same direction.
    #[error("`{0}` and `{1}` translate the same IDs in the same direction")]
    Overlap(String, String),
}

impl std::str::FromStr for Rule {
    type Err = RuleError;

    /// The type (letters, `-`, `_`), then a separator (any other character)
    /// used between every field after it.
    fn from_str(s: &str) -> Result<Rule, RuleError> {
        let form = || RuleError::Form(s.to_string());
        let split = s
            .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
            .ok_or_else(form)?;
        let (kind, rest) = s.split_at(split);
        let sep = rest.chars().next().ok_or_else(form)?;
        let v: Vec<u32> = rest[sep.len_utf8()..]
            .split(sep)
            .map(|f| f.parse().map_err(|_| form()))
            .collect::<Result<_, _>>()?;
        let rule = match (kind.to_ascii_lowercase().as_str(), &v[..]) {
            ("guest", &[from, to, count]) => Rule::Guest { from, to, count },
            ("host", &[from, to, count]) => Rule::Host { from, to, count },
            ("squash-guest", &[from, to, count]) => Rule::SquashGuest { from, to, count },
            ("squash-host", &[from, to, count]) => Rule::SquashHost { from, to, count },
            ("forbid-guest", &[from, count]) => Rule::ForbidGuest { from, count },
            ("map", &[guest, host, count]) => Rule::Map { guest, host, count },
            _ => return Err(form()),
        };
        let ok = |base: u32, count: u32| {
            count > 0 && base.checked_add(count - 1).is_some_and(|e| e < u32::MAX)
        };
        let fits = match rule {
            Rule::Guest { from, to, count }
            | Rule::Host { from, to, count }
            | Rule::Map {
                guest: from,
                host: to,
                count,
            } => ok(from, count) && ok(to, count),
            Rule::SquashGuest { from, to, count } | Rule::SquashHost { from, to, count } => {
                ok(from, count) && to < u32::MAX
            }
            Rule::ForbidGuest { from, count } => ok(from, count),
        };
        if !fits {
            return Err(RuleError::Range(s.to_string()));
        }
        Ok(rule)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rule::Guest { from, to, count } => write!(f, "guest:{from}:{to}:{count}"),
            Rule::Host { from, to, count } => write!(f, "host:{from}:{to}:{count}"),
            Rule::SquashGuest { from, to, count } => write!(f, "squash-guest:{from}:{to}:{count}"),
            Rule::SquashHost { from, to, count } => write!(f, "squash-host:{from}:{to}:{count}"),
            Rule::ForbidGuest { from, count } => write!(f, "forbid-guest:{from}:{count}"),
            Rule::Map { guest, host, count } => write!(f, "map:{guest}:{host}:{count}"),
        }
    }
}

/// What an ID in a range becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The same offset from this base.
    Base(u32),
    /// This one ID.
    One(u32),
    /// Refused.
    Forbidden,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    from: u32,
    count: u32,
    to: To,
    rule: Rule,
}

impl Span {
    fn apply(&self, id: u32) -> Option<Option<u32>> {
        if id < self.from || id - self.from >= self.count {
            return None;
        }
        Some(match self.to {
            To::Base(b) => Some(b + (id - self.from)),
            To::One(t) => Some(t),
            To::Forbidden => None,
        })
    }
}

/// The rules for UIDs, or for GIDs: both directions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    to_host: Vec<Span>,
    to_guest: Vec<Span>,
}

impl Table {
    /// Builds the table; rules overlapping in one direction are refused.
    pub fn new(rules: &[Rule]) -> Result<Table, RuleError> {
        let mut t = Table::default();
        for &rule in rules {
            let span = |from, count, to| Span {
                from,
                count,
                to,
                rule,
            };
            match rule {
                Rule::Guest { from, to, count } => t.to_host.push(span(from, count, To::Base(to))),
                Rule::Host { from, to, count } => t.to_guest.push(span(from, count, To::Base(to))),
                Rule::SquashGuest { from, to, count } => {
                    t.to_host.push(span(from, count, To::One(to)))
                }
                Rule::SquashHost { from, to, count } => {
                    t.to_guest.push(span(from, count, To::One(to)))
                }
                Rule::ForbidGuest { from, count } => {
                    t.to_host.push(span(from, count, To::Forbidden))
                }
                Rule::Map { guest, host, count } => {
                    t.to_host.push(span(guest, count, To::Base(host)));
                    t.to_guest.push(span(host, count, To::Base(guest)));
                }
            }
        }
        for side in [&t.to_host, &t.to_guest] {
            for (i, a) in side.iter().enumerate() {
                if let Some(b) = side[i + 1..]
                    .iter()
                    .find(|b| a.from < b.from + b.count && b.from < a.from + a.count)
                {
                    return Err(RuleError::Overlap(a.rule.to_string(), b.rule.to_string()));
                }
            }
        }
        Ok(t)
    }

    /// Whether no rule is set (every ID stays as it is).
    pub fn is_identity(&self) -> bool {
        self.to_host.is_empty() && self.to_guest.is_empty()
    }

    /// The host ID for a guest ID; `None` when a forbid-guest rule covers it.
    pub fn to_host(&self, id: u32) -> Option<u32> {
        self.to_host
            .iter()
            .find_map(|s| s.apply(id))
            .unwrap_or(Some(id))
    }

    /// The guest ID for a host ID.
    pub fn to_guest(&self, id: u32) -> u32 {
        self.to_guest
            .iter()
            .find_map(|s| s.apply(id))
            .flatten()
            .unwrap_or(id)
    }
}

/// UID and GID tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translation {
    /// `--translate-uid`.
    pub uid: Table,
    /// `--translate-gid`.
    pub gid: Table,
}

impl Translation {
    /// Parses every `--translate-uid` and `--translate-gid`.
    pub fn parse(uid: &[String], gid: &[String]) -> Result<Translation, RuleError> {
        let rules = |v: &[String]| {
            v.iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<Rule>, _>>()
        };
        Ok(Translation {
            uid: Table::new(&rules(uid)?)?,
            gid: Table::new(&rules(gid)?)?,
        })
    }

    /// Whether nothing is translated.
    pub fn is_identity(&self) -> bool {
        self.uid.is_identity() && self.gid.is_identity()
    }
}

/// A caller ID the guest may not use: creating files as it fails (EPERM).
pub const FORBIDDEN: u32 = u32::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rules: &[&str]) -> Result<Table, RuleError> {
        let r: Vec<Rule> = rules.iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
        Table::new(&r)
    }

    #[test]
    fn virtiofsd_forms_parse_and_print() {
        for s in [
            "guest:1000:2000:10",
            "host:0:100000:1",
            "squash-guest:0:1000:65536",
            "squash-host:100000:0:65536",
            "forbid-guest:0:1",
            "map:0:100000:65536",
        ] {
            assert_eq!(s.parse::<Rule>().unwrap().to_string(), s);
        }
        assert_eq!(
            "map/0/5/1".parse::<Rule>().unwrap(),
            Rule::Map {
                guest: 0,
                host: 5,
                count: 1
            }
        );
        for bad in [
            "",
            "map",
            "map:",
            "map:1:2",
            "guest:1:2:3:4",
            "forbid-guest:1:2:3",
            "nope:1:2:3",
            "map:a:1:1",
        ] {
            assert!(
                matches!(bad.parse::<Rule>(), Err(RuleError::Form(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            "map:0:0:0".parse::<Rule>(),
            Err(RuleError::Range(_))
        ));
        assert!(matches!(
            "guest:4294967295:0:1".parse::<Rule>(),
            Err(RuleError::Range(_))
        ));
    }

    #[test]
    fn each_type_translates_its_direction_only() {
        let t = table(&["guest:1000:2000:10", "host:3000:500:5"]).unwrap();
        assert_eq!(t.to_host(1003), Some(2003));
        assert_eq!(t.to_host(1010), Some(1010), "outside the range: unchanged");
        assert_eq!(t.to_guest(2003), 2003, "guest: is one-way");
        assert_eq!(t.to_guest(3004), 504);
        let t = table(&["squash-guest:0:1000:65536", "squash-host:0:99:1"]).unwrap();
        assert_eq!(t.to_host(0), Some(1000));
        assert_eq!(t.to_host(777), Some(1000));
        assert_eq!(t.to_guest(0), 99);
        let t = table(&["forbid-guest:0:1", "map:1000:100000:100"]).unwrap();
        assert_eq!(t.to_host(0), None);
        assert_eq!(t.to_host(1050), Some(100050));
        assert_eq!(t.to_guest(100050), 1050);
        assert_eq!(t.to_guest(0), 0);
    }

    #[test]
    fn overlapping_rules_in_one_direction_are_refused() {
        assert!(matches!(
            table(&["map:0:100000:100", "guest:50:7:1"]),
            Err(RuleError::Overlap(..))
        ));
        assert!(table(&["guest:0:100:10", "host:0:100:10"]).is_ok());
    }
}
