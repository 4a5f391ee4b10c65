// SPDX-License-Identifier: Apache-2.0
//! The envelope of a state blob:
//!
//! ```text
//! offset size  field
//! 0      8     magic "XVFSSTAT"
//! 8      4     format version (little endian)
//! 12     4     payload length in bytes (little endian), at most MAX_PAYLOAD
//! 16     4     CRC-32 of the payload (little endian)
//! 20     n     payload: postcard encoding of the state of that version
//! ```
//!
//! A reader accepts every version from [`MIN_FORMAT_VERSION`] to
//! [`FORMAT_VERSION`]; anything else,
//! a bad magic, a length that does not match, or a bad checksum is refused
//! before the payload is decoded.

use crate::crc32::crc32;

pub const MAGIC: &[u8; 8] = b"XVFSSTAT";
/// The format this build writes: one number for the whole blob
/// (2: settings are named enums, no longer numeric codes; 3: the polling
/// CPU budget, --syslog, --preserve-noatime; 4: the --migration-* settings;
/// 5: --killpriv-v2; 6: pre-release builds wrote several field sets under
/// this number; 7: release 0.2.0, the first under the compatibility policy
/// of docs/live-upgrade.md, with 6's last field set; 8: release 0.3.0,
/// a list of parts each with its own version, the settings split by
/// meaning, `--crash-restart-keep`). Every version is pinned by a golden
/// sample (`tests/golden.rs`).
pub const FORMAT_VERSION: u32 = 8;
/// The oldest format this build reads, and writes for a successor that
/// reads no newer: 7 (6 and older came from builds before release 0.2.0,
/// whose field sets cannot be told apart: refused).
pub const MIN_FORMAT_VERSION: u32 = 7;
pub const HEADER_LEN: usize = 20;
/// Upper bound on a payload (64 MiB: millions of inodes).
pub const MAX_PAYLOAD: usize = 64 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("state blob too short ({0} bytes)")]
    Short(usize),
    #[error("not a state blob (bad magic)")]
    Magic,
    #[error("state format version {0} is not supported (this build reads {MIN_FORMAT_VERSION} to {FORMAT_VERSION})")]
    Version(u32),
    #[error("state payload length {declared} does not match the {actual} bytes received")]
    Length { declared: usize, actual: usize },
    #[error("state payload of {0} bytes exceeds the limit")]
    TooLarge(usize),
    #[error("state checksum mismatch (corrupt blob)")]
    Checksum,
}

/// Wraps `payload` as format `version`.
pub fn encode(version: u32, payload: &[u8]) -> Vec<u8> {
    encode_with(MAGIC, version, payload)
}

/// Wraps `payload` as `version` of the format named by `magic` (the same
/// envelope serves the upgrade state and the migration stream).
pub fn encode_with(magic: &[u8; 8], version: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(magic);
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(&crc32(payload).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Checks the envelope; returns the format version and the payload.
pub fn decode(blob: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    decode_with(MAGIC, blob, MIN_FORMAT_VERSION..=FORMAT_VERSION)
}

/// Checks an envelope with `magic` whose version is in `versions`.
pub fn decode_with<'a>(
    magic: &[u8; 8],
    blob: &'a [u8],
    versions: std::ops::RangeInclusive<u32>,
) -> Result<(u32, &'a [u8]), FrameError> {
    if blob.len() < HEADER_LEN {
        return Err(FrameError::Short(blob.len()));
    }
    if &blob[0..8] != magic {
        return Err(FrameError::Magic);
    }
    let word = |o: usize| u32::from_le_bytes([blob[o], blob[o + 1], blob[o + 2], blob[o + 3]]);
    let version = word(8);
    if !versions.contains(&version) {
        return Err(FrameError::Version(version));
    }
    let declared = word(12) as usize;
    if declared > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(declared));
    }
    let payload = &blob[HEADER_LEN..];
    if payload.len() != declared {
        return Err(FrameError::Length {
            declared,
            actual: payload.len(),
        });
    }
    if crc32(payload) != word(16) {
        return Err(FrameError::Checksum);
    }
    Ok((version, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let b = encode(FORMAT_VERSION, b"hello");
        assert_eq!(decode(&b), Ok((FORMAT_VERSION, &b"hello"[..])));
    }

    #[test]
    fn refuses_damage() {
        let b = encode(FORMAT_VERSION, b"hello state");
        assert_eq!(decode(&b[..10]), Err(FrameError::Short(10)));
        let mut m = b.clone();
        m[0] = b'Y';
        assert_eq!(decode(&m), Err(FrameError::Magic));
        let newer = encode(FORMAT_VERSION + 1, b"x");
        assert_eq!(decode(&newer), Err(FrameError::Version(FORMAT_VERSION + 1)));
        assert_eq!(decode(&encode(0, b"x")), Err(FrameError::Version(0)));
        let mut c = b.clone();
        let last = c.len() - 1;
        c[last] ^= 1;
        assert_eq!(decode(&c), Err(FrameError::Checksum));
        let mut t = b.clone();
        t.pop();
        assert!(matches!(decode(&t), Err(FrameError::Length { .. })));
        let mut big = b.clone();
        big[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&big), Err(FrameError::TooLarge(_))));
    }
}
