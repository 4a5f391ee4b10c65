// SPDX-License-Identifier: Apache-2.0
//! A payload made of parts, each with its own version and length (state
//! format 8, migration format 3), so that each part can evolve on its own
//! and nothing is ever decoded as something else:
//!
//! ```text
//! payload = postcard Vec<Part>
//! Part    = { id: u16, version: u16, optional: bool, bytes: Vec<u8> }
//! ```
//!
//! A known part must come in the version this build reads and use all of
//! its bytes; an unknown part is skipped when marked optional (something a
//! reader may ignore) and refused otherwise; every part a reader needs must
//! be there, once. A later part version adds a decoder beside the old one
//! for as long as the compatibility policy says.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::bounded::{self, BoundError, Budget, Refused};

/// One part as encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub id: u16,
    pub version: u16,
    pub optional: bool,
    #[serde(deserialize_with = "part_bytes")]
    pub bytes: Vec<u8>,
}

/// A part's bytes, read as one slice and copied once: postcard writes a
/// list of bytes as it writes a byte string (its length, then the bytes),
/// and reads a byte string without growing a vector byte by byte.
fn part_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;

    impl serde::de::Visitor<'_> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a part's bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
    }

    d.deserialize_bytes(Bytes)
}

/// One kind of part a format has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartKind {
    pub id: u16,
    pub name: &'static str,
    /// The version this build writes and reads.
    pub version: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("{name} version {version} is not supported (this build reads {reads})")]
    Version {
        name: &'static str,
        version: u16,
        reads: u16,
    },
    #[error("part {0} is unknown to this build and not optional")]
    Unknown(u16),
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("{0} appears twice")]
    Twice(&'static str),
    #[error("{name} does not decode (a value this build does not know, or a truncated field)")]
    Decode {
        name: &'static str,
        #[source]
        source: postcard::Error,
    },
    #[error("{name} has {extra} bytes after its end")]
    Trailing { name: &'static str, extra: usize },
    #[error("{name} claims more than it holds")]
    Bound {
        name: &'static str,
        #[source]
        source: BoundError,
    },
    #[error("the list of parts does not decode")]
    List(#[source] postcard::Error),
    #[error("the list of parts claims more than it holds")]
    ListBound(#[source] BoundError),
    #[error("the list of parts has {0} bytes after its end")]
    ListTrailing(usize),
    #[error("a part does not encode")]
    Encode(#[source] postcard::Error),
}

/// `value` as a part of kind `kind`.
pub fn part<T: Serialize>(kind: PartKind, value: &T) -> Result<Part, PartError> {
    Ok(Part {
        id: kind.id,
        version: kind.version,
        optional: false,
        bytes: postcard::to_stdvec(value).map_err(PartError::Encode)?,
    })
}

/// The payload of `parts`.
pub fn encode(parts: &[Part]) -> Result<Vec<u8>, PartError> {
    postcard::to_stdvec(parts).map_err(PartError::Encode)
}

/// A decoded payload: its parts by kind, each checked for its version.
/// What decoding them may build is bounded by the payload's size
/// ([`crate::bounded`]), for all of them together.
#[derive(Debug)]
pub struct Parts {
    kinds: &'static [PartKind],
    found: Vec<Option<Part>>,
    budget: Budget,
}

/// Splits `payload` into the parts of `kinds` (see the module's rules).
pub fn decode(payload: &[u8], kinds: &'static [PartKind]) -> Result<Parts, PartError> {
    decode_reading(payload, kinds, &[])
}

/// As [`decode`], also taking a part in an older version that `older`
/// lists as `(id, version)` (this build still has its decoder):
/// [`Parts::version`] says which version came.
pub fn decode_reading(
    payload: &[u8],
    kinds: &'static [PartKind],
    older: &[(u16, u16)],
) -> Result<Parts, PartError> {
    let budget = Budget::for_input(payload.len());
    let (parts, rest): (Vec<Part>, _) =
        bounded::take_from_bytes(payload, &budget).map_err(|e| match e {
            Refused::Bound(b) => PartError::ListBound(b),
            Refused::Decode(e) => PartError::List(e),
        })?;
    if !rest.is_empty() {
        return Err(PartError::ListTrailing(rest.len()));
    }
    let mut found: Vec<Option<Part>> = vec![None; kinds.len()];
    for p in parts {
        let Some(i) = kinds.iter().position(|k| k.id == p.id) else {
            if p.optional {
                continue;
            }
            return Err(PartError::Unknown(p.id));
        };
        let kind = kinds[i];
        if found[i].is_some() {
            return Err(PartError::Twice(kind.name));
        }
        if p.version != kind.version && !older.contains(&(p.id, p.version)) {
            return Err(PartError::Version {
                name: kind.name,
                version: p.version,
                reads: kind.version,
            });
        }
        found[i] = Some(p);
    }
    Ok(Parts {
        kinds,
        found,
        budget,
    })
}

impl Parts {
    /// The version in which part `which` came, if the payload has it.
    pub fn version(&self, which: usize) -> Option<u16> {
        self.found[which].as_ref().map(|p| p.version)
    }

    /// Part `which` (an index into the kinds), decoded; all of its bytes used.
    pub fn take<T: DeserializeOwned>(&self, which: usize) -> Result<T, PartError> {
        let name = self.kinds[which].name;
        let p = self.found[which].as_ref().ok_or(PartError::Missing(name))?;
        let (value, rest) =
            bounded::take_from_bytes(&p.bytes, &self.budget).map_err(|e| match e {
                Refused::Bound(source) => PartError::Bound { name, source },
                Refused::Decode(source) => PartError::Decode { name, source },
            })?;
        if !rest.is_empty() {
            return Err(PartError::Trailing {
                name,
                extra: rest.len(),
            });
        }
        Ok(value)
    }

    /// Part `which` if the payload has it (a part written only when there
    /// is something to say), decoded as by [`Parts::take`].
    pub fn take_if_there<T: DeserializeOwned>(&self, which: usize) -> Result<Option<T>, PartError> {
        if self.found[which].is_none() {
            return Ok(None);
        }
        self.take(which).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: &[PartKind] = &[
        PartKind {
            id: 1,
            name: "a",
            version: 1,
        },
        PartKind {
            id: 2,
            name: "b",
            version: 2,
        },
    ];

    fn good() -> Vec<Part> {
        vec![
            part(KINDS[0], &7u32).unwrap(),
            part(KINDS[1], &"x".to_string()).unwrap(),
        ]
    }

    fn read(parts: &[Part]) -> Result<(u32, String), PartError> {
        let p = decode(&encode(parts).unwrap(), KINDS)?;
        Ok((p.take(0)?, p.take(1)?))
    }

    #[test]
    fn each_part_is_checked_on_its_own() {
        assert_eq!(read(&good()).unwrap(), (7, "x".into()));

        let mut newer = good();
        newer[1].version = 3;
        let e = read(&newer).unwrap_err().to_string();
        assert_eq!(e, "b version 3 is not supported (this build reads 2)");

        let mut missing = good();
        missing.remove(0);
        assert!(matches!(read(&missing), Err(PartError::Missing("a"))));

        let mut twice = good();
        twice.push(good().remove(0));
        assert!(matches!(read(&twice), Err(PartError::Twice("a"))));

        let mut padded = good();
        padded[0].bytes.push(0);
        assert!(matches!(
            read(&padded),
            Err(PartError::Trailing {
                name: "a",
                extra: 1
            })
        ));

        let mut truncated = good();
        truncated[1].bytes.pop();
        assert!(matches!(
            read(&truncated),
            Err(PartError::Decode { name: "b", .. })
        ));

        let mut unknown = good();
        unknown.push(Part {
            id: 99,
            version: 1,
            optional: true,
            bytes: vec![1, 2],
        });
        assert_eq!(
            read(&unknown).unwrap(),
            (7, "x".into()),
            "an optional unknown part is skipped"
        );
        unknown.last_mut().unwrap().optional = false;
        assert!(matches!(read(&unknown), Err(PartError::Unknown(99))));

        let mut older = good();
        older[1].version = 1;
        let p = decode(&encode(&older).unwrap(), KINDS);
        assert!(matches!(p, Err(PartError::Version { version: 1, .. })));
        let p = decode_reading(&encode(&older).unwrap(), KINDS, &[(2, 1)]).unwrap();
        assert_eq!((p.version(0), p.version(1)), (Some(1), Some(1)));
        assert_eq!(p.take::<String>(1).unwrap(), "x", "listed as still read");

        let mut list = encode(&good()).unwrap();
        list.push(0);
        assert!(matches!(
            decode(&list, KINDS),
            Err(PartError::ListTrailing(1))
        ));
        // Five parts declared, none there: refused before anything is built.
        assert!(matches!(
            decode(&[5], KINDS),
            Err(PartError::ListBound(crate::bounded::BoundError::Count {
                declared: 5,
                left: 0
            }))
        ));
        assert!(matches!(decode(&[1, 1], KINDS), Err(PartError::List(_))));
    }
}
