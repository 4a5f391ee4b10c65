// SPDX-License-Identifier: Apache-2.0
//! Fixtures the tests of every crate and the fuzz targets share (feature
//! `test-util`; no release build has it): FUSE requests as a guest driver
//! sends them, and a passthrough configuration for a test directory.

use std::path::Path;

use crate::abi::{opcode, InHeader, InitIn, Wire};
use crate::Config;

/// The passthrough configuration of a share at `root`: the defaults
/// (those of `xvirtiofsd` with no option) but for the directory.
pub fn config_for(root: &Path) -> Config {
    Config {
        root_dir: root.to_path_buf(),
        ..Config::default()
    }
}

/// `s` as a FUSE name: its bytes and a NUL.
pub fn cname(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// A FUSE request: the in-header `h` (its `len` set here to cover `body`)
/// followed by `body`.
pub fn request_with(h: InHeader, body: &[u8]) -> Vec<u8> {
    let h = InHeader {
        len: (InHeader::SIZE + body.len()) as u32,
        ..h
    };
    [h.to_bytes(), body.to_vec()].concat()
}

/// A FUSE request for `op` on `node` from pid 1 as uid and gid 0.
pub fn request(op: u32, unique: u64, node: u64, body: &[u8]) -> Vec<u8> {
    let h = InHeader {
        opcode: op,
        unique,
        nodeid: node,
        pid: 1,
        ..Default::default()
    };
    request_with(h, body)
}

/// INIT's arguments for protocol 7.`minor` with `flags` and `flags2`
/// offered (128 KiB of read-ahead).
pub fn init_in(minor: u32, flags: u32, flags2: u32) -> InitIn {
    InitIn {
        major: 7,
        minor,
        max_readahead: 1 << 17,
        flags,
        flags2,
        unused: [0; 11],
    }
}

/// The INIT request (unique 1) that starts a session on protocol 7.41 with
/// every flag offered, so that later requests reach the file system.
pub fn init_request() -> Vec<u8> {
    request(
        opcode::INIT,
        1,
        0,
        &init_in(41, u32::MAX, u32::MAX).to_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_its_header_and_body() {
        let req = request(opcode::LOOKUP, 5, 1, &cname("a"));
        let h = InHeader::from_bytes(&req).unwrap();
        assert_eq!(h.len as usize, req.len());
        assert_eq!(
            (h.opcode, h.unique, h.nodeid, h.pid),
            (opcode::LOOKUP, 5, 1, 1)
        );
        assert_eq!(&req[InHeader::SIZE..], b"a\0");
    }
}
