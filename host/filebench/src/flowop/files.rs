// SPDX-License-Identifier: Apache-2.0
//! File and directory flowops: createfile, openfile, closefile, deletefile,
//! statfile, makedir/removedir, listdir.

use std::fs;

use super::{Res, Slot, Worker};
use crate::ast::FlowopKind;
use crate::fileset::Want;
use crate::shared::End;

impl Worker {
    pub(super) fn create_file(&mut self, i: usize) -> Res {
        let fs = self.fileset(i)?;
        let key = self.slot_key(i);
        if self.slots.contains_key(&key) {
            return Err(self.fail(i, "createfile", format!("fd {key} is already open")));
        }
        let entry = self.pick(i, &fs, Want::Missing)?;
        let file = match self.open_entry(i, &fs, entry, true) {
            Ok(f) => f,
            Err(e) => {
                fs.unbusy(entry, None, 0);
                return Err(e);
            }
        };
        fs.unbusy(entry, Some(true), 1);
        let fsi = self.plan.ops[i].fileset.unwrap_or(0);
        let flags = self.open_flags(i);
        self.slots.insert(
            key,
            Slot {
                file: std::sync::Arc::new(file),
                fileset: fsi,
                entry,
                flags,
                offset: 0,
                size: 0,
            },
        );
        Ok(0)
    }

    pub(super) fn open_file(&mut self, i: usize) -> Res {
        let key = self.slot_key(i);
        if self.slots.contains_key(&key) {
            return Err(self.fail(i, "openfile", format!("fd {key} is already open")));
        }
        self.open_slot(i, key)?;
        Ok(0)
    }

    pub(super) fn close_file(&mut self, i: usize) -> Res {
        let key = self.slot_key(i);
        match self.slots.remove(&key) {
            Some(s) => {
                drop(s.file);
                self.last_file.insert(key, (s.fileset, s.entry));
                if let Some(fs) = self.filesets.get(s.fileset) {
                    fs.closed(s.entry);
                }
                Ok(0)
            }
            None => Err(self.fail(i, "closefile", format!("fd {key} is not open"))),
        }
    }

    /// `deletefile filesetname=…`: picks an existing file; as Filebench's
    /// `flowoplib_deletefile`, a file that some descriptor has open is not
    /// deleted and nothing is counted.
    pub(super) fn delete_file(&mut self, i: usize) -> Res {
        if self.plan.ops[i].fileset.is_none() {
            return self.delete_by_fd(i);
        }
        let fs = self.fileset(i)?;
        let entry = self.pick(i, &fs, Want::Existing)?;
        if fs.open_count(entry) > 0 {
            fs.unbusy(entry, None, 0);
            self.uncounted = true;
            return Ok(0);
        }
        let r = fs::remove_file(&fs.files[entry].path);
        let gone = r.is_ok();
        fs.unbusy(entry, gone.then_some(false), 0);
        r.map_err(|e| self.fail(i, &format!("unlink {}", fs.files[entry].path.display()), e))?;
        Ok(0)
    }

    /// `deletefile fd=N` without a fileset: unlinks the file open in slot N,
    /// or the one last opened there, once no other thread is busy with it
    /// (Filebench waits likewise); then slot N names no file. As Filebench's,
    /// nothing is deleted nor counted while another descriptor has the file
    /// open (more than ours when slot N is open, any when it is closed).
    fn delete_by_fd(&mut self, i: usize) -> Res {
        let key = self.slot_key(i);
        let (fsi, entry, open_here) = match self.slots.get(&key) {
            Some(s) => (s.fileset, s.entry, true),
            None => match self.last_file.get(&key) {
                Some(&(f, e)) => (f, e, false),
                None => return Err(self.fail(i, "deletefile", format!("fd {key} names no file"))),
            },
        };
        let Some(fs) = self.filesets.get(fsi).cloned() else {
            return Err(self.fail(i, "deletefile", "no such fileset"));
        };
        if !fs.take_entry_wait(entry, &self.shared.stop) {
            return Err(End::Stopped);
        }
        self.last_file.remove(&key);
        let others = fs.open_count(entry).saturating_sub(u32::from(open_here));
        if others > 0 {
            fs.unbusy(entry, None, 0);
            self.uncounted = true;
            return Ok(0);
        }
        let path = &fs.files[entry].path;
        let r = fs::remove_file(path);
        let gone = match &r {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        let open = i64::from(fs.open_count(entry));
        fs.unbusy(entry, gone.then_some(false), if gone { -open } else { 0 });
        match r {
            // Already gone (another thread deleted it): nothing to do.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(self.fail(i, &format!("unlink {}", path.display()), e))
            }
            _ => Ok(0),
        }
    }

    pub(super) fn stat_file(&mut self, i: usize) -> Res {
        let fs = self.fileset(i)?;
        let entry = self.pick(i, &fs, Want::Existing)?;
        let r = fs::metadata(&fs.files[entry].path);
        fs.unbusy(entry, None, 0);
        r.map_err(|e| self.fail(i, &format!("stat {}", fs.files[entry].path.display()), e))?;
        Ok(0)
    }

    pub(super) fn make_or_remove_dir(&mut self, i: usize) -> Res {
        let make = self.plan.ops[i].kind == FlowopKind::Mkdir;
        let fs = self.fileset(i)?;
        let want = if make { Want::Missing } else { Want::Existing };
        let Some(idx) = fs.pick_leafdir(want) else {
            return Err(self.norsc(
                i,
                &format!("no leaf directory left in fileset {}", fs.spec.name),
            ));
        };
        let path = fs.leafdirs[idx].path.clone();
        let r = if make {
            fs::create_dir_all(&path)
        } else {
            fs::remove_dir(&path)
        };
        // A failed makedir leaves the directory missing, a failed removedir
        // leaves it there.
        fs.finish_leafdir(idx, r.is_ok() == make);
        r.map_err(|e| self.fail(i, &path.display().to_string(), e))?;
        Ok(0)
    }

    pub(super) fn list_dir(&mut self, i: usize) -> Res {
        let fs = self.fileset(i)?;
        let Some(dir) = fs.pick_dir() else {
            return Err(self.norsc(i, &format!("fileset {} has no directory", fs.spec.name)));
        };
        let rd = fs::read_dir(dir).map_err(|e| self.fail(i, &dir.display().to_string(), e))?;
        for e in rd {
            e.map_err(|e| self.fail(i, &dir.display().to_string(), e))?;
        }
        Ok(0)
    }
}
