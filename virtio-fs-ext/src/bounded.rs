// SPDX-License-Identifier: Apache-2.0
//! Decoding postcard with what it builds bounded by the input's own size.
//!
//! Every state, checkpoint and migration stream comes from a process this
//! one does not trust, and postcard believes the lengths it reads: a list
//! that declares 2^32 entries is read entry by entry until the input runs
//! out, and entries of a few bytes each (an empty string: one byte, 24 in
//! memory) build far more than the input holds. [`take_from_bytes`] checks,
//! before anything of a list is built:
//!
//! - its declared length against the bytes left (every entry takes at
//!   least one): a list that cannot be there is refused at once
//!   ([`BoundError::Count`]);
//! - what it will take in memory (its length times its entries' size;
//!   strings and byte lists by their length) against a budget of
//!   [`BYTES_PER_INPUT_BYTE`] per byte of the whole input, plus
//!   [`SLACK`] ([`BoundError::Memory`]), shared by every part decoded from
//!   the same input.
//!
//! So a decoder builds at most a fixed multiple of what it was given,
//! whatever the input says, and refuses before it reserves. The encoding
//! is postcard's, unchanged (the golden samples decode as before).

use std::cell::Cell;
use std::fmt;
use std::rc::Rc;

use postcard::de_flavors::Flavor;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use serde::Deserialize;

/// Memory a decoder may build per byte of its input: more than any state
/// or stream an honest writer makes needs (3 for a state's inodes, 6 for
/// migrated inodes with short names, 7 to 11 for virtiofsd's stream of
/// them, 15 at most for one made of nothing but lost inodes; see the
/// `honest` tests).
pub const BYTES_PER_INPUT_BYTE: usize = 16;
/// Memory a decoder may build whatever the size of its input.
pub const SLACK: usize = 1 << 20;

/// Why a bounded decode refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    #[error("a list declares {declared} entries, but only {left} bytes are left to hold them")]
    Count { declared: usize, left: usize },
    #[error(
        "decoding would build more than {budget} bytes ({BYTES_PER_INPUT_BYTE} per byte of the \
         {input}-byte input, plus {SLACK})"
    )]
    Memory { budget: usize, input: usize },
}

/// A refused decode: a bound, or postcard's own complaint.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Bound(#[from] BoundError),
    #[error(transparent)]
    Decode(#[from] postcard::Error),
}

/// What the decodes of one input may still build.
#[derive(Debug)]
pub struct Budget {
    left: Cell<usize>,
    total: usize,
    input: usize,
}

impl Budget {
    /// The budget of an input of `len` bytes.
    pub fn for_input(len: usize) -> Budget {
        let total = len
            .saturating_mul(BYTES_PER_INPUT_BYTE)
            .saturating_add(SLACK);
        Budget {
            left: Cell::new(total),
            total,
            input: len,
        }
    }

    /// Bytes built so far.
    pub fn used(&self) -> usize {
        self.total - self.left.get()
    }
}

/// `postcard::take_from_bytes` within `budget` (see the module).
pub fn take_from_bytes<'de, T: Deserialize<'de>>(
    bytes: &'de [u8],
    budget: &Budget,
) -> Result<(T, &'de [u8]), Refused> {
    let left = Rc::new(Cell::new(bytes.len()));
    let ctx = Ctx {
        left: Rc::clone(&left),
        budget,
        refused: Cell::new(None),
    };
    let mut de = postcard::Deserializer::from_flavor(Input { rest: bytes, left });
    let value = T::deserialize(Bounded {
        de: &mut de,
        ctx: &ctx,
    });
    if let Some(why) = ctx.refused.take() {
        return Err(why.into());
    }
    Ok((value?, de.finalize()?))
}

/// A byte slice as postcard reads it, telling how much is left.
struct Input<'de> {
    rest: &'de [u8],
    left: Rc<Cell<usize>>,
}

impl<'de> Flavor<'de> for Input<'de> {
    type Remainder = &'de [u8];
    type Source = &'de [u8];

    fn pop(&mut self) -> postcard::Result<u8> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or(postcard::Error::DeserializeUnexpectedEnd)?;
        self.rest = rest;
        self.left.set(rest.len());
        Ok(b)
    }

    fn try_take_n(&mut self, ct: usize) -> postcard::Result<&'de [u8]> {
        if ct > self.rest.len() {
            return Err(postcard::Error::DeserializeUnexpectedEnd);
        }
        let (taken, rest) = self.rest.split_at(ct);
        self.rest = rest;
        self.left.set(rest.len());
        Ok(taken)
    }

    fn finalize(self) -> postcard::Result<&'de [u8]> {
        Ok(self.rest)
    }
}

/// One decode: the input left, the budget, and the first bound crossed.
struct Ctx<'c> {
    left: Rc<Cell<usize>>,
    budget: &'c Budget,
    refused: Cell<Option<BoundError>>,
}

impl Ctx<'_> {
    fn refuse<E: de::Error>(&self, why: BoundError) -> E {
        let e = E::custom(&why);
        self.refused.set(Some(why));
        e
    }

    /// A list of `declared` entries must fit in the input left.
    fn count<E: de::Error>(&self, declared: usize) -> Result<(), E> {
        let left = self.left.get();
        if declared > left {
            return Err(self.refuse(BoundError::Count { declared, left }));
        }
        Ok(())
    }

    /// `bytes` more to be built.
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.budget.left.get().checked_sub(bytes) {
            Some(rest) => {
                self.budget.left.set(rest);
                Ok(())
            }
            None => Err(self.refuse(BoundError::Memory {
                budget: self.budget.total,
                input: self.budget.input,
            })),
        }
    }
}

/// A deserializer whose every list, string and nested value is checked.
struct Bounded<'c, D> {
    de: D,
    ctx: &'c Ctx<'c>,
}

impl<'c, D> Bounded<'c, D> {
    fn wrap<V>(&self, inner: V, list: bool) -> Wrap<'c, V> {
        Wrap {
            inner,
            ctx: self.ctx,
            list,
        }
    }
}

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let w = self.wrap(visitor, false);
            self.de.$method(w)
        }
    )*};
}

impl<'de, 'c, D: Deserializer<'de>> Deserializer<'de> for Bounded<'c, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, true);
        self.de.deserialize_seq(w)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, true);
        self.de.deserialize_map(w)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_unit_struct(name, w)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_newtype_struct(name, w)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_tuple(len, w)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_tuple_struct(name, len, w)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_struct(name, fields, w)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(visitor, false);
        self.de.deserialize_enum(name, variants, w)
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

/// A visitor whose nested values go through [`Bounded`] again; `list`: the
/// sequence or map it visits has a declared length (not a struct's or a
/// tuple's fields).
struct Wrap<'c, V> {
    inner: V,
    ctx: &'c Ctx<'c>,
    list: bool,
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

macro_rules! charged_visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.ctx.charge(v.len())?;
            self.inner.$method(v)
        }
    )*};
}

impl<'de, 'c, V: Visitor<'de>> Visitor<'de> for Wrap<'c, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
        visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
        visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char
    }

    charged_visit! {
        visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Bounded {
            de: d,
            ctx: self.ctx,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Bounded {
            de: d,
            ctx: self.ctx,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let pending = if self.list {
            let declared = seq.size_hint().unwrap_or(0);
            self.ctx.count(declared)?;
            Some(declared)
        } else {
            None
        };
        self.inner.visit_seq(Seq {
            inner: seq,
            ctx: self.ctx,
            pending,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let declared = map.size_hint().unwrap_or(0);
        self.ctx.count(declared)?;
        self.inner.visit_map(Map {
            inner: map,
            ctx: self.ctx,
            keys: Some(declared),
            values: Some(declared),
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(Enum {
            inner: data,
            ctx: self.ctx,
        })
    }
}

/// A seed whose value is deserialized through [`Bounded`].
struct Seed<'c, S> {
    inner: S,
    ctx: &'c Ctx<'c>,
}

impl<'de, 'c, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'c, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Bounded {
            de: d,
            ctx: self.ctx,
        })
    }
}

/// `pending` entries of `size` bytes each, charged once.
fn charge_all<E: de::Error>(
    ctx: &Ctx<'_>,
    pending: &mut Option<usize>,
    size: usize,
) -> Result<(), E> {
    match pending.take() {
        Some(n) => ctx.charge(n.saturating_mul(size)),
        None => Ok(()),
    }
}

/// A sequence whose entries, if it has a declared length, are charged all
/// at once before the first is built.
struct Seq<'c, A> {
    inner: A,
    ctx: &'c Ctx<'c>,
    pending: Option<usize>,
}

impl<'de, 'c, A: SeqAccess<'de>> SeqAccess<'de> for Seq<'c, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        charge_all(self.ctx, &mut self.pending, std::mem::size_of::<T::Value>())?;
        self.inner.next_element_seed(Seed {
            inner: seed,
            ctx: self.ctx,
        })
    }

    /// None until the entries are charged: what reserves room for them
    /// (a vector's capacity) must not do so before.
    fn size_hint(&self) -> Option<usize> {
        self.pending
            .map_or_else(|| self.inner.size_hint(), |_| None)
    }
}

/// A map whose keys and values are charged all at once before the first.
struct Map<'c, A> {
    inner: A,
    ctx: &'c Ctx<'c>,
    keys: Option<usize>,
    values: Option<usize>,
}

impl<'de, 'c, A: MapAccess<'de>> MapAccess<'de> for Map<'c, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        charge_all(self.ctx, &mut self.keys, std::mem::size_of::<K::Value>())?;
        self.inner.next_key_seed(Seed {
            inner: seed,
            ctx: self.ctx,
        })
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        charge_all(self.ctx, &mut self.values, std::mem::size_of::<S::Value>())?;
        self.inner.next_value_seed(Seed {
            inner: seed,
            ctx: self.ctx,
        })
    }

    /// None until the entries are charged (see [`Seq`]).
    fn size_hint(&self) -> Option<usize> {
        self.keys.map_or_else(|| self.inner.size_hint(), |_| None)
    }
}

/// An enum whose variant's contents go through [`Bounded`].
struct Enum<'c, A> {
    inner: A,
    ctx: &'c Ctx<'c>,
}

impl<'de, 'c, A: EnumAccess<'de>> EnumAccess<'de> for Enum<'c, A> {
    type Error = A::Error;
    type Variant = Variant<'c, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let (value, variant) = self.inner.variant_seed(Seed {
            inner: seed,
            ctx: self.ctx,
        })?;
        Ok((
            value,
            Variant {
                inner: variant,
                ctx: self.ctx,
            },
        ))
    }
}

struct Variant<'c, A> {
    inner: A,
    ctx: &'c Ctx<'c>,
}

impl<'de, 'c, A: VariantAccess<'de>> VariantAccess<'de> for Variant<'c, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.newtype_variant_seed(Seed {
            inner: seed,
            ctx: self.ctx,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(
            len,
            Wrap {
                inner: visitor,
                ctx: self.ctx,
                list: false,
            },
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner.struct_variant(
            fields,
            Wrap {
                inner: visitor,
                ctx: self.ctx,
                list: false,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::HashMap;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        n: u64,
        names: Vec<String>,
        pairs: HashMap<u32, Vec<u8>>,
        kind: Option<Kind>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Kind {
        A,
        B(Vec<u16>),
        C { list: Vec<(u8, String)> },
    }

    fn sample() -> Sample {
        Sample {
            n: 7,
            names: vec!["a".into(), String::new(), "ccc".into()],
            pairs: [(1, vec![1, 2]), (2, vec![])].into_iter().collect(),
            kind: Some(Kind::C {
                list: vec![(1, "x".into())],
            }),
        }
    }

    fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Result<T, Refused> {
        let (v, rest) = take_from_bytes(b, &Budget::for_input(b.len()))?;
        assert!(rest.is_empty());
        Ok(v)
    }

    #[test]
    fn what_postcard_reads_reads_the_same() {
        let s = sample();
        let b = postcard::to_stdvec(&s).unwrap();
        assert_eq!(decode::<Sample>(&b).unwrap(), s);
        let k = Kind::B(vec![1, 300]);
        assert_eq!(
            decode::<Kind>(&postcard::to_stdvec(&k).unwrap()).unwrap(),
            k
        );
        let mut extra = b.clone();
        extra.push(9);
        let budget = Budget::for_input(extra.len());
        let (_, rest) = take_from_bytes::<Sample>(&extra, &budget).unwrap();
        assert_eq!(rest, [9]);
        assert!(budget.used() > 0);
        assert!(matches!(
            decode::<Sample>(&b[..b.len() - 1]),
            Err(Refused::Decode(_))
        ));
    }

    /// varint of `n`, as postcard writes a length.
    fn varint(mut n: u64) -> Vec<u8> {
        let mut v = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                v.push(b);
                return v;
            }
            v.push(b | 0x80);
        }
    }

    #[test]
    fn a_list_longer_than_its_input_is_refused_before_it_is_built() {
        // 2^32 strings declared, 100 empty ones present.
        let mut b = varint(1 << 32);
        b.extend_from_slice(&[0; 100]);
        let e = decode::<Vec<String>>(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Refused::Bound(BoundError::Count {
                    declared: 4294967296,
                    left: 100
                })
            ),
            "{e}"
        );
        // As deep as it hides: a map's length, in an enum in an option.
        let mut b = postcard::to_stdvec(&7u64).unwrap();
        b.extend(varint(0)); // no names
        b.extend(varint(1 << 40)); // the map
        b.extend_from_slice(&[0; 10]);
        assert!(matches!(
            decode::<Sample>(&b),
            Err(Refused::Bound(BoundError::Count { .. }))
        ));
        let mut b = vec![1, 1]; // Some(B(..))
        b.extend(varint(1000));
        b.extend_from_slice(&[1; 999]);
        let e = decode::<Option<Kind>>(&b).unwrap_err();
        assert!(matches!(e, Refused::Bound(BoundError::Count { .. })), "{e}");
    }

    #[test]
    fn what_would_build_more_than_the_budget_is_refused_before_it_is_built() {
        // Four million empty strings: 4 MiB of input, 96 MiB in memory.
        let n = 4 << 20;
        let mut b = varint(n);
        b.resize(b.len() + n as usize, 0);
        let e = decode::<Vec<String>>(&b).unwrap_err();
        assert!(
            matches!(e, Refused::Bound(BoundError::Memory { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("per byte"), "{e}");
        // The same count of bytes is what it is.
        assert_eq!(decode::<Vec<u8>>(&b).unwrap().len(), n as usize);
        // One budget for every decode of one input.
        let small = postcard::to_stdvec(&vec![0u64; 1000]).unwrap();
        let budget = Budget::for_input(small.len());
        let mut ok = 0;
        while take_from_bytes::<Vec<u64>>(&small, &budget).is_ok() {
            ok += 1;
        }
        assert!(ok > 1 && budget.used() <= SLACK + BYTES_PER_INPUT_BYTE * small.len());
    }
}

/// What honest states and streams build per byte of input, against
/// [`BYTES_PER_INPUT_BYTE`]: a bound an honest writer never reaches.
#[cfg(test)]
pub(crate) mod honest {
    use super::*;
    use xvfs_fs::state::{
        FsState, HandleState, InodeState, Location, MigratedHandle, MigratedInode, MigrationFs,
    };

    /// Bytes built per byte of `b`, decoded as `T`.
    pub(crate) fn ratio<T: for<'de> Deserialize<'de>>(b: &[u8]) -> f64 {
        let budget = Budget::for_input(b.len());
        let (_, rest) = take_from_bytes::<T>(b, &budget).expect("an honest input decodes");
        assert!(rest.is_empty());
        budget.used() as f64 / b.len() as f64
    }

    const N: u64 = 200_000;

    /// A share's inodes as a daemon holds them: ids from 2, host inode
    /// numbers of a few million, one open file per two inodes.
    pub(crate) fn fs_state() -> FsState {
        FsState {
            root_dev: 0x803,
            root_ino: 2,
            next_id: N + 2,
            inodes: (0..N)
                .map(|i| InodeState {
                    id: i + 2,
                    dev: 0x803,
                    ino: 1_000_000 + 7 * i,
                    refs: 1,
                    generation: 0,
                    file_type: libc::S_IFREG,
                    fd_index: i as u32,
                })
                .collect(),
            handles: (0..N / 2)
                .map(|i| HandleState {
                    fh: i,
                    inode: 2 * i + 2,
                    flags: libc::O_RDWR,
                    fd_index: (N + i) as u32,
                })
                .collect(),
            locks: Vec::new(),
        }
    }

    /// The same inodes for a VM migration, found by short names (one to
    /// six characters), or lost (`lost`: every one).
    pub(crate) fn migration_fs(lost: bool) -> MigrationFs {
        MigrationFs {
            next_id: N + 2,
            next_fh: N / 2,
            inodes: (0..N)
                .map(|i| MigratedInode {
                    id: i + 2,
                    refs: 1,
                    generation: 0,
                    file_type: Some(libc::S_IFREG),
                    location: if lost {
                        Location::Invalid { why: "gone".into() }
                    } else {
                        Location::Path {
                            parent: 1 + i / 1000,
                            name: format!("{}", i % 1000).into_bytes(),
                        }
                    },
                    verify: None,
                })
                .collect(),
            handles: (0..N / 2)
                .map(|i| MigratedHandle {
                    fh: i,
                    inode: 2 * i + 2,
                    flags: libc::O_RDWR,
                })
                .collect(),
        }
    }

    #[test]
    fn honest_inputs_stay_well_inside_the_bound() {
        let fs = postcard::to_stdvec(&fs_state()).unwrap();
        let found = postcard::to_stdvec(&migration_fs(false)).unwrap();
        let lost = postcard::to_stdvec(&migration_fs(true)).unwrap();
        for (what, r) in [
            ("state fs part", ratio::<FsState>(&fs)),
            ("migrated inodes by name", ratio::<MigrationFs>(&found)),
            ("migrated inodes lost", ratio::<MigrationFs>(&lost)),
        ] {
            eprintln!("{what}: {r:.2} bytes built per input byte");
            assert!(r <= BYTES_PER_INPUT_BYTE as f64 / 2.0, "{what}: {r:.2}");
        }
    }
}
