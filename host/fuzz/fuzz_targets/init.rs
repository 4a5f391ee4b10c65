// SPDX-License-Identifier: Apache-2.0
//! Shared by the fuzz targets: the INIT request that starts a FUSE session
//! (every flag offered, protocol 7.41), so that later requests reach the
//! file system.

use xvfs_fs::abi::{self, opcode, Wire};

pub fn init_request() -> Vec<u8> {
    let body = abi::InitIn {
        major: 7,
        minor: 41,
        max_readahead: 1 << 17,
        flags: u32::MAX,
        flags2: u32::MAX,
        unused: [0; 11],
    }
    .to_bytes();
    let h = abi::InHeader {
        len: (abi::InHeader::SIZE + body.len()) as u32,
        opcode: opcode::INIT,
        unique: 1,
        ..Default::default()
    };
    [h.to_bytes(), body].concat()
}
