// SPDX-License-Identifier: Apache-2.0
//! `--xattrmap`: translating extended attribute names between the guest and
//! the host, with virtiofsd's syntax and meaning (its `doc/xattr-mapping.md`
//! describes them; this is our own implementation).
//!
//! A map is a list of rules, each `<s>type<s>scope<s>key<s>prepend<s>` where
//! `<s>` is the rule's first non-blank character, rules separated by blanks.
//! The first rule that matches decides:
//!
//! | type | a guest name (scope client) starting with `key` | a host name (scope server) starting with `prepend` |
//! |---|---|---|
//! | `prefix` | goes to the host as `prepend` + name | goes to the guest without `prepend` |
//! | `ok` | passes unchanged | passes unchanged |
//! | `bad` | EPERM | hidden |
//! | `unsupported` | ENOTSUP | hidden |
//!
//! Scope `all` is both. `<s>map<s>key<s>prepend<s>` (at most one, last) is
//! short for the rules that prefix `key` (everything if empty) with
//! `prepend` and hide or refuse everything that would bypass the prefix. A
//! guest name no rule matches is refused (EPERM); a host name no rule
//! matches is hidden.

use std::ffi::{CStr, CString};

/// What a rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Prefix,
    Ok,
    Bad,
    Unsupported,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    kind: Kind,
    client: bool,
    server: bool,
    key: Vec<u8>,
    prepend: Vec<u8>,
}

/// A parsed `--xattrmap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrMap {
    rules: Vec<Rule>,
}

/// Why a map does not parse (the number is the rule's, from 1).
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XattrMapError {
    #[error("--xattrmap has no rule")]
    Empty,
    #[error("--xattrmap rule {0}: fewer fields than `<s>type<s>scope<s>key<s>prepend<s>`")]
    Incomplete(usize),
    #[error("--xattrmap rule {0}: unknown type `{1}` (prefix, ok, bad, unsupported, map)")]
    Type(usize, String),
    #[error("--xattrmap rule {0}: unknown scope `{1}` (client, server, all)")]
    Scope(usize, String),
    #[error("--xattrmap rule {0}: a `map` rule must be the only map rule and the last rule")]
    MapNotLast(usize),
    #[error("--xattrmap rule {0}: a name contains a NUL byte")]
    Nul(usize),
}

impl XattrMap {
    /// Parses virtiofsd's syntax.
    pub fn parse(text: &str) -> Result<XattrMap, XattrMapError> {
        let mut rules = Vec::new();
        let mut rest = text.as_bytes();
        let mut n = 0;
        let mut saw_map = false;
        loop {
            rest = trim_start(rest);
            let Some(&sep) = rest.first() else { break };
            n += 1;
            if saw_map {
                return Err(XattrMapError::MapNotLast(n));
            }
            let (ty, after) = fields(&rest[1..], sep, n, 1)?;
            let word = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            if ty[0] == b"map" {
                let (f, after) = fields(after, sep, n, 2)?;
                map_rules(&f[0], &f[1], &mut rules);
                rest = after;
                saw_map = true;
                continue;
            }
            let kind = match ty[0].as_slice() {
                b"prefix" => Kind::Prefix,
                b"ok" => Kind::Ok,
                b"bad" => Kind::Bad,
                b"unsupported" => Kind::Unsupported,
                other => return Err(XattrMapError::Type(n, word(other))),
            };
            let (fields, after) = fields(after, sep, n, 3)?;
            rest = after;
            let (client, server) = match fields[0].as_slice() {
                b"client" => (true, false),
                b"server" => (false, true),
                b"all" => (true, true),
                other => return Err(XattrMapError::Scope(n, word(other))),
            };
            rules.push(Rule {
                kind,
                client,
                server,
                key: fields[1].clone(),
                prepend: fields[2].clone(),
            });
        }
        if rules.is_empty() {
            return Err(XattrMapError::Empty);
        }
        Ok(XattrMap { rules })
    }

    /// The host name for a guest's name (GET/SET/REMOVEXATTR), or the errno
    /// to answer.
    pub fn to_host(&self, name: &CStr) -> Result<CString, i32> {
        let name = name.to_bytes();
        let Some(r) = self
            .rules
            .iter()
            .find(|r| r.client && name.starts_with(&r.key))
        else {
            return Err(libc::EPERM);
        };
        match r.kind {
            Kind::Prefix => {
                let mut v = r.prepend.clone();
                v.extend_from_slice(name);
                CString::new(v).map_err(|_| libc::EINVAL)
            }
            Kind::Ok => CString::new(name).map_err(|_| libc::EINVAL),
            Kind::Bad => Err(libc::EPERM),
            Kind::Unsupported => Err(libc::ENOTSUP),
        }
    }

    /// The guest's name for a host name (LISTXATTR); `None`: hidden.
    pub fn to_guest<'a>(&self, name: &'a [u8]) -> Option<&'a [u8]> {
        let r = self
            .rules
            .iter()
            .find(|r| r.server && name.starts_with(&r.prepend))?;
        match r.kind {
            Kind::Prefix => Some(&name[r.prepend.len()..]).filter(|n| !n.is_empty()),
            Kind::Ok => Some(name),
            Kind::Bad | Kind::Unsupported => None,
        }
    }

    /// Whether a guest's `security.capability` reaches the host under
    /// another name (then the host kernel would not clear it on write or
    /// chown, as it clears the real one).
    pub fn remaps_capability(&self) -> bool {
        self.to_host(c"security.capability")
            .is_ok_and(|n| n.as_bytes() != b"security.capability")
    }

    /// A host `listxattr` list (names each NUL-terminated) as the guest sees it.
    pub fn list_to_guest(&self, host: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(host.len());
        for name in host.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            if let Some(g) = self.to_guest(name) {
                out.extend_from_slice(g);
                out.push(0);
            }
        }
        out
    }
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

/// The next `count` fields of rule `n`, each ended by `sep`, and what
/// follows them. A field with a NUL byte is refused.
fn fields(
    b: &[u8],
    sep: u8,
    n: usize,
    count: usize,
) -> Result<(Vec<Vec<u8>>, &[u8]), XattrMapError> {
    let mut out = Vec::with_capacity(count);
    let mut rest = b;
    for _ in 0..count {
        let end = rest
            .iter()
            .position(|&c| c == sep)
            .ok_or(XattrMapError::Incomplete(n))?;
        if rest[..end].contains(&0) {
            return Err(XattrMapError::Nul(n));
        }
        out.push(rest[..end].to_vec());
        rest = &rest[end + 1..];
    }
    Ok((out, rest))
}

/// The rules `map key prepend` stands for.
fn map_rules(key: &[u8], prepend: &[u8], rules: &mut Vec<Rule>) {
    let rule = |kind, client, server, key: &[u8], prepend: &[u8]| Rule {
        kind,
        client,
        server,
        key: key.to_vec(),
        prepend: prepend.to_vec(),
    };
    rules.push(rule(Kind::Prefix, true, true, key, prepend));
    if key.is_empty() {
        // Everything is prefixed: hide whatever the host has unprefixed.
        rules.push(rule(Kind::Bad, true, true, b"", b""));
    } else {
        // Hide host names that look like a mapped name but are not.
        rules.push(rule(Kind::Bad, false, true, b"", key));
        // The guest may not reach the prefixed names directly.
        rules.push(rule(Kind::Bad, true, false, prepend, b""));
        rules.push(rule(Kind::Ok, true, true, b"", b""));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(m: &XattrMap, name: &str) -> Result<String, i32> {
        let c = CString::new(name).unwrap_or_default();
        m.to_host(&c)
            .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
    }

    fn guest(m: &XattrMap, name: &str) -> Option<String> {
        m.to_guest(name.as_bytes())
            .map(|n| String::from_utf8_lossy(n).into_owned())
    }

    #[test]
    fn prefix_everything_and_hide_the_rest() {
        // virtiofsd's example 1, in both spellings.
        for text in [
            ":prefix:all::user.virtiofs.::bad:all:::",
            ":map::user.virtiofs.:",
        ] {
            let m = XattrMap::parse(text).unwrap();
            assert_eq!(
                host(&m, "trusted.x"),
                Ok("user.virtiofs.trusted.x".into()),
                "{text}"
            );
            assert_eq!(
                host(&m, "user.a"),
                Ok("user.virtiofs.user.a".into()),
                "{text}"
            );
            assert_eq!(
                guest(&m, "user.virtiofs.security.selinux"),
                Some("security.selinux".into())
            );
            assert_eq!(
                guest(&m, "security.selinux"),
                None,
                "{text}: unprefixed host names hidden"
            );
            assert_eq!(
                guest(&m, "user.virtiofs."),
                None,
                "{text}: an empty name is no name"
            );
        }
    }

    #[test]
    fn selective_prefix_with_guards() {
        // virtiofsd's example 2.
        let m = XattrMap::parse(
            "/prefix/all/trusted./user.virtiofs./
             /bad/server//trusted./
             /bad/client/user.virtiofs.//
             /ok/all///",
        )
        .unwrap();
        assert_eq!(host(&m, "trusted.a"), Ok("user.virtiofs.trusted.a".into()));
        assert_eq!(
            host(&m, "user.virtiofs.x"),
            Err(libc::EPERM),
            "no direct access to the target"
        );
        assert_eq!(host(&m, "user.y"), Ok("user.y".into()));
        assert_eq!(
            guest(&m, "user.virtiofs.trusted.a"),
            Some("trusted.a".into())
        );
        assert_eq!(guest(&m, "trusted.host"), None, "host trusted.* hidden");
        assert_eq!(guest(&m, "user.y"), Some("user.y".into()));
        // `map` with a key expands to the same guards.
        let m2 = XattrMap::parse(":map:trusted.:user.virtiofs.:").unwrap();
        for n in ["trusted.a", "user.virtiofs.x", "user.y"] {
            assert_eq!(host(&m2, n), host(&m, n), "{n}");
        }
        for n in ["user.virtiofs.trusted.a", "trusted.host", "user.y"] {
            assert_eq!(guest(&m2, n), guest(&m, n), "{n}");
        }
    }

    #[test]
    fn unsupported_and_no_match() {
        let m = XattrMap::parse(":unsupported:client:security.:: :ok:client:user.::").unwrap();
        assert_eq!(host(&m, "security.selinux"), Err(libc::ENOTSUP));
        assert_eq!(host(&m, "user.a"), Ok("user.a".into()));
        assert_eq!(host(&m, "trusted.a"), Err(libc::EPERM), "no rule: refused");
        assert_eq!(guest(&m, "user.a"), None, "no server rule: hidden");
    }

    #[test]
    fn listing_is_filtered_and_renamed() {
        let m = XattrMap::parse(":map::user.virtiofs.:").unwrap();
        let list = m.list_to_guest(b"user.virtiofs.a\0security.selinux\0user.virtiofs.b\0");
        assert_eq!(list, b"a\0b\0");
    }

    #[test]
    fn capability_remapping_is_detected() {
        assert!(XattrMap::parse(":map::user.virtiofs.:")
            .unwrap()
            .remaps_capability());
        assert!(!XattrMap::parse(":map:user.:user.virtiofs.:")
            .unwrap()
            .remaps_capability());
        assert!(!XattrMap::parse(":ok:all:::").unwrap().remaps_capability());
    }

    #[test]
    fn bad_maps_are_refused() {
        assert_eq!(XattrMap::parse("  "), Err(XattrMapError::Empty));
        assert_eq!(
            XattrMap::parse(":ok:all::"),
            Err(XattrMapError::Incomplete(1))
        );
        assert!(matches!(
            XattrMap::parse(":good:all:::"),
            Err(XattrMapError::Type(1, _))
        ));
        assert!(matches!(
            XattrMap::parse(":ok:some:::"),
            Err(XattrMapError::Scope(1, _))
        ));
        assert_eq!(
            XattrMap::parse(":map::a.: :ok:all:::"),
            Err(XattrMapError::MapNotLast(2))
        );
    }
}
