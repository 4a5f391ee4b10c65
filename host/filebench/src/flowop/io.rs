// SPDX-License-Identifier: Apache-2.0
//! Data flowops: read, write, aiowrite, aiowait, readwholefile,
//! writewholefile, appendfile, appendfilerand, fsync, fsyncset.

use super::{Res, Worker};
use crate::ast::FlowopKind;

impl Worker {
    pub(super) fn read_whole_file(&mut self, i: usize) -> Res {
        let key = self.ensure_slot(i)?;
        let iosize = self.io_size(i) as usize;
        let mut total = 0u64;
        loop {
            let n = iosize;
            match self.read_at(i, key, n, total)? {
                0 => break,
                got => total += got as u64,
            }
        }
        Ok(total)
    }

    pub(super) fn write_whole_file(&mut self, i: usize) -> Res {
        let key = self.ensure_slot(i)?;
        let size = match self.plan.ops[i].srcfd {
            Some(src) => match self.slots.get(&src) {
                Some(s) => self.filesets[s.fileset].files[s.entry].size,
                None => {
                    return Err(self.fail(i, "writewholefile", format!("srcfd {src} is not open")))
                }
            },
            None => {
                let s = &self.slots[&key];
                self.filesets[s.fileset].files[s.entry].size
            }
        };
        let iosize = self.io_size(i);
        let mut done = 0u64;
        while done < size {
            let n = iosize.min(size - done) as usize;
            self.write_at(i, key, n, done)?;
            done += n as u64;
        }
        if let Some(s) = self.slots.get_mut(&key) {
            s.size = s.size.max(done);
        }
        Ok(done)
    }

    pub(super) fn append_file(&mut self, i: usize) -> Res {
        let key = self.ensure_slot(i)?;
        let iosize = self.io_size(i);
        let n = if self.plan.ops[i].kind == FlowopKind::AppendFileRand {
            1 + self.rng.below(iosize)
        } else {
            iosize
        };
        let n = n as usize;
        let end = self.slots[&key]
            .file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| self.fail(i, "fstat", e))?;
        self.write_at(i, key, n, end)?;
        if let Some(s) = self.slots.get_mut(&key) {
            s.size = end + n as u64;
        }
        Ok(n as u64)
    }

    /// `read`: random, or sequential from where the last one stopped; as
    /// Filebench's, a sequential read at the end of the file reads nothing,
    /// counts as an operation of 0 bytes and starts the file over.
    pub(super) fn read(&mut self, i: usize) -> Res {
        let key = self.ensure_slot(i)?;
        let want = self.io_size(i);
        let n = want as usize;
        let off = self.next_offset(i, key, n as u64);
        let got = self.read_at(i, key, n, off)? as u64;
        let random = self.plan.ops[i].random;
        if let Some(s) = self.slots.get_mut(&key) {
            s.offset = if got == 0 && !random { 0 } else { off + got };
        }
        Ok(got)
    }

    pub(super) fn write(&mut self, i: usize) -> Res {
        let key = self.ensure_slot(i)?;
        let want = self.io_size(i);
        let n = want as usize;
        let off = self.next_offset(i, key, n as u64);
        if self.plan.ops[i].kind == FlowopKind::AioWrite {
            self.aio_write(i, key, n, off)?;
        } else {
            self.write_at(i, key, n, off)?;
        }
        if let Some(s) = self.slots.get_mut(&key) {
            s.offset = off + n as u64;
            s.size = s.size.max(s.offset);
        }
        Ok(n as u64)
    }

    pub(super) fn aio_wait(&mut self, i: usize) -> Res {
        if let Some(aio) = self.aio.as_mut() {
            let r = aio.wait();
            r.map_err(|e| self.fail(i, "aiowait", e))?;
        }
        Ok(0)
    }

    pub(super) fn fsync(&mut self, i: usize) -> Res {
        let op = &self.plan.ops[i];
        if op.kind == FlowopKind::FsyncSet {
            let fsi = op.fileset;
            for s in self.slots.values().filter(|s| Some(s.fileset) == fsi) {
                s.file.sync_all().map_err(|e| self.fail(i, "fsync", e))?;
            }
            return Ok(0);
        }
        let key = op.fd;
        match self.slots.get(&key) {
            Some(s) => s.file.sync_all().map_err(|e| self.fail(i, "fsync", e))?,
            None => return Err(self.fail(i, "fsync", format!("fd {key} is not open"))),
        }
        Ok(0)
    }
}
