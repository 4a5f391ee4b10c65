// SPDX-License-Identifier: Apache-2.0
//! The FUSE wire format, protocol 7.41 (Linux 6.12, `include/uapi/linux/fuse.h`).
//!
//! Every structure is `#[repr(C)]` with the exact field layout of the kernel
//! header, and its size is checked at compile time. Structures are never
//! transmuted from guest bytes: [`Wire::from_bytes`] copies field by field out of
//! a byte slice whose length was checked first, and [`Wire::to_bytes`] does the
//! reverse, so this module contains no `unsafe`. virtio-fs messages are
//! little-endian (virtio 1.x), whatever the host is.

/// Major version of the protocol; a guest asking for another one gets `EPROTO`.
pub const KERNEL_VERSION: u32 = 7;
/// Highest minor version this implementation speaks.
pub const KERNEL_MINOR_VERSION: u32 = 41;
/// Lowest minor version accepted (virtio-fs appeared with 7.31 in Linux 5.4).
pub const MIN_KERNEL_MINOR_VERSION: u32 = 31;
/// Node id of the root directory.
pub const ROOT_ID: u64 = 1;

/// A fixed-size wire structure, encoded little-endian field by field.
pub trait Wire: Sized + Copy + Default {
    /// Encoded size in bytes (equals `size_of::<Self>()`, checked at compile time).
    const SIZE: usize;

    /// Decodes from the first [`Self::SIZE`] bytes of `b`, or `None` if `b` is
    /// shorter.
    fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::SIZE)?;
        let mut v = Self::default();
        v.decode_exact(b);
        Some(v)
    }

    /// Appends the encoding to `out`.
    fn encode_into(&self, out: &mut Vec<u8>);

    /// The encoding as a new vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::SIZE);
        self.encode_into(&mut v);
        v
    }

    /// Fills `self` from `b`, whose length is exactly [`Self::SIZE`].
    #[doc(hidden)]
    fn decode_exact(&mut self, b: &[u8]);
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn encode_into(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn decode_exact(&mut self, b: &[u8]) {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                *self = <$t>::from_le_bytes(a);
            }
        }
    )*};
}
wire_int!(u16, u32, u64, i32, i64);

impl<const N: usize> Wire for [u32; N]
where
    [u32; N]: Default,
{
    const SIZE: usize = 4 * N;
    fn encode_into(&self, out: &mut Vec<u8>) {
        for v in self {
            v.encode_into(out);
        }
    }
    fn decode_exact(&mut self, b: &[u8]) {
        for (v, c) in self.iter_mut().zip(b.chunks_exact(4)) {
            v.decode_exact(c);
        }
    }
}

/// Declares a wire struct: `#[repr(C)]`, `Wire` impl, and a compile-time check
/// that the struct has no padding and the kernel's size.
macro_rules! wire_struct {
    ($(#[$m:meta])* pub struct $name:ident ($size:expr) { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        ///
        /// Fields as in `fuse.h`.
        #[allow(missing_docs)]
        #[repr(C)]
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }

        impl Wire for $name {
            const SIZE: usize = 0 $(+ <$t as Wire>::SIZE)*;
            fn encode_into(&self, out: &mut Vec<u8>) {
                $(self.$f.encode_into(out);)*
            }
            #[allow(unused_assignments)]
            fn decode_exact(&mut self, b: &[u8]) {
                let mut off = 0usize;
                $(
                    self.$f.decode_exact(&b[off..off + <$t as Wire>::SIZE]);
                    off += <$t as Wire>::SIZE;
                )*
            }
        }

        const _: () = assert!(<$name as Wire>::SIZE == $size);
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
    };
}

wire_struct! {
    /// `struct fuse_in_header`: starts every request.
    pub struct InHeader(40) {
        pub len: u32,
        pub opcode: u32,
        pub unique: u64,
        pub nodeid: u64,
        pub uid: u32,
        pub gid: u32,
        pub pid: u32,
        /// Length of request extensions, in 8-byte units.
        pub total_extlen: u16,
        pub padding: u16,
    }
}

wire_struct! {
    /// `struct fuse_out_header`: starts every reply.
    pub struct OutHeader(16) {
        pub len: u32,
        /// 0 or a negative errno.
        pub error: i32,
        pub unique: u64,
    }
}

wire_struct! {
    /// `struct fuse_attr`.
    pub struct Attr(88) {
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub rdev: u32,
        pub blksize: u32,
        pub flags: u32,
    }
}

/// `fuse_setxattr_in.setxattr_flags`: clear setgid when setting the access
/// ACL (the caller is not in the file's group and lacks CAP_FSETID).
pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;

/// `fuse_attr.flags`: the directory is a submount (FUSE_SUBMOUNTS).
pub const ATTR_SUBMOUNT: u32 = 1 << 0;

/// `fuse_attr.flags`: the guest accesses this file through the DAX window
/// (a mount with `dax=inode`, FUSE_HAS_INODE_DAX negotiated).
pub const ATTR_DAX: u32 = 1 << 1;

/// The unit a Linux guest maps a file in through the DAX window
/// (`FUSE_DAX_SZ`): every FUSE_SETUPMAPPING asks for one such chunk.
pub const DAX_CHUNK: u64 = 2 << 20;

wire_struct! {
    /// `struct fuse_kstatfs`.
    pub struct Kstatfs(80) {
        pub blocks: u64,
        pub bfree: u64,
        pub bavail: u64,
        pub files: u64,
        pub ffree: u64,
        pub bsize: u32,
        pub namelen: u32,
        pub frsize: u32,
        pub padding: u32,
        pub spare: [u32; 6],
    }
}

wire_struct! {
    /// `struct fuse_file_lock`.
    pub struct FileLock(24) {
        pub start: u64,
        pub end: u64,
        pub typ: u32,
        pub pid: u32,
    }
}

wire_struct! {
    /// `struct fuse_entry_out`: reply of LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
    pub struct EntryOut(128) {
        pub nodeid: u64,
        pub generation: u64,
        pub entry_valid: u64,
        pub attr_valid: u64,
        pub entry_valid_nsec: u32,
        pub attr_valid_nsec: u32,
        pub attr: Attr,
    }
}

wire_struct! {
    /// `struct fuse_forget_in`.
    pub struct ForgetIn(8) { pub nlookup: u64, }
}

wire_struct! {
    /// `struct fuse_forget_one`: an entry of BATCH_FORGET.
    pub struct ForgetOne(16) { pub nodeid: u64, pub nlookup: u64, }
}

wire_struct! {
    /// `struct fuse_batch_forget_in`.
    pub struct BatchForgetIn(8) { pub count: u32, pub dummy: u32, }
}

wire_struct! {
    /// `struct fuse_getattr_in`.
    pub struct GetattrIn(16) { pub getattr_flags: u32, pub dummy: u32, pub fh: u64, }
}

wire_struct! {
    /// `struct fuse_attr_out`.
    pub struct AttrOut(104) {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub dummy: u32,
        pub attr: Attr,
    }
}

wire_struct! {
    /// `struct fuse_mknod_in`.
    pub struct MknodIn(16) { pub mode: u32, pub rdev: u32, pub umask: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_mkdir_in`.
    pub struct MkdirIn(8) { pub mode: u32, pub umask: u32, }
}

wire_struct! {
    /// `struct fuse_rename_in`.
    pub struct RenameIn(8) { pub newdir: u64, }
}

wire_struct! {
    /// `struct fuse_rename2_in`.
    pub struct Rename2In(16) { pub newdir: u64, pub flags: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_link_in`.
    pub struct LinkIn(8) { pub oldnodeid: u64, }
}

wire_struct! {
    /// `struct fuse_setattr_in`.
    pub struct SetattrIn(88) {
        pub valid: u32,
        pub padding: u32,
        pub fh: u64,
        pub size: u64,
        pub lock_owner: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub unused4: u32,
        pub uid: u32,
        pub gid: u32,
        pub unused5: u32,
    }
}

wire_struct! {
    /// `struct fuse_open_in`.
    pub struct OpenIn(8) { pub flags: u32, pub open_flags: u32, }
}

wire_struct! {
    /// `struct fuse_create_in` (also used by TMPFILE).
    pub struct CreateIn(16) { pub flags: u32, pub mode: u32, pub umask: u32, pub open_flags: u32, }
}

wire_struct! {
    /// `struct fuse_open_out`.
    pub struct OpenOut(16) { pub fh: u64, pub open_flags: u32, pub backing_id: i32, }
}

wire_struct! {
    /// `struct fuse_release_in`.
    pub struct ReleaseIn(24) { pub fh: u64, pub flags: u32, pub release_flags: u32, pub lock_owner: u64, }
}

wire_struct! {
    /// `struct fuse_flush_in`.
    pub struct FlushIn(24) { pub fh: u64, pub unused: u32, pub padding: u32, pub lock_owner: u64, }
}

wire_struct! {
    /// `struct fuse_read_in` (READ, READDIR, READDIRPLUS).
    pub struct ReadIn(40) {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub read_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
}

wire_struct! {
    /// `struct fuse_write_in`.
    pub struct WriteIn(40) {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub write_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
}

wire_struct! {
    /// `struct fuse_write_out` (also the reply of COPY_FILE_RANGE).
    pub struct WriteOut(8) { pub size: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_statfs_out`.
    pub struct StatfsOut(80) { pub st: Kstatfs, }
}

wire_struct! {
    /// `struct fuse_fsync_in` (FSYNC, FSYNCDIR).
    pub struct FsyncIn(16) { pub fh: u64, pub fsync_flags: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_setxattr_in` with FUSE_SETXATTR_EXT; without it only the
    /// first [`COMPAT_SETXATTR_IN_SIZE`] bytes are sent.
    pub struct SetxattrIn(16) { pub size: u32, pub flags: u32, pub setxattr_flags: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_getxattr_in` (GETXATTR, LISTXATTR).
    pub struct GetxattrIn(8) { pub size: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_getxattr_out`.
    pub struct GetxattrOut(8) { pub size: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_lk_out`.
    pub struct LkOut(24) { pub lk: FileLock, }
}

wire_struct! {
    /// `struct fuse_lk_in`.
    pub struct LkIn(48) { pub fh: u64, pub owner: u64, pub lk: FileLock, pub lk_flags: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_access_in`.
    pub struct AccessIn(8) { pub mask: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_init_in` (7.36+; older kernels send only the first 16 bytes).
    pub struct InitIn(64) {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub flags2: u32,
        pub unused: [u32; 11],
    }
}

wire_struct! {
    /// `struct fuse_init_out`.
    pub struct InitOut(64) {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub max_background: u16,
        pub congestion_threshold: u16,
        pub max_write: u32,
        pub time_gran: u32,
        pub max_pages: u16,
        pub map_alignment: u16,
        pub flags2: u32,
        pub max_stack_depth: u32,
        pub unused: [u32; 6],
    }
}

wire_struct! {
    /// `struct fuse_interrupt_in`.
    pub struct InterruptIn(8) { pub unique: u64, }
}

wire_struct! {
    /// `struct fuse_fallocate_in`.
    pub struct FallocateIn(32) { pub fh: u64, pub offset: u64, pub length: u64, pub mode: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_dirent` without the trailing name.
    pub struct Dirent(24) { pub ino: u64, pub off: u64, pub namelen: u32, pub typ: u32, }
}

wire_struct! {
    /// `struct fuse_lseek_in`.
    pub struct LseekIn(24) { pub fh: u64, pub offset: u64, pub whence: u32, pub padding: u32, }
}

wire_struct! {
    /// `struct fuse_lseek_out`.
    pub struct LseekOut(8) { pub offset: u64, }
}

wire_struct! {
    /// `struct fuse_copy_file_range_in`.
    pub struct CopyFileRangeIn(56) {
        pub fh_in: u64,
        pub off_in: u64,
        pub nodeid_out: u64,
        pub fh_out: u64,
        pub off_out: u64,
        pub len: u64,
        pub flags: u64,
    }
}

wire_struct! {
    /// `struct fuse_setupmapping_in`: map `len` bytes of the file at
    /// `foffset` into the DAX window at `moffset`.
    pub struct SetupMappingIn(40) {
        pub fh: u64,
        pub foffset: u64,
        pub len: u64,
        /// [`setupmapping_flags`].
        pub flags: u64,
        pub moffset: u64,
    }
}

wire_struct! {
    /// `struct fuse_removemapping_in`: `count` [`RemoveMappingOne`]s follow.
    pub struct RemoveMappingIn(4) { pub count: u32, }
}

wire_struct! {
    /// `struct fuse_removemapping_one`.
    pub struct RemoveMappingOne(16) {
        pub moffset: u64,
        pub len: u64,
    }
}

/// `fuse_setupmapping_in.flags`.
pub mod setupmapping_flags {
    /// The guest writes through the mapping.
    pub const WRITE: u64 = 1 << 0;
    /// The guest reads through the mapping.
    pub const READ: u64 = 1 << 1;
}

wire_struct! {
    /// `struct fuse_syncfs_in`.
    pub struct SyncfsIn(8) { pub padding: u64, }
}

wire_struct! {
    /// `struct fuse_statx_in`.
    pub struct StatxIn(24) {
        pub getattr_flags: u32,
        pub reserved: u32,
        pub fh: u64,
        pub sx_flags: u32,
        pub sx_mask: u32,
    }
}

wire_struct! {
    /// `struct fuse_sx_time`.
    pub struct SxTime(16) { pub tv_sec: i64, pub tv_nsec: u32, pub reserved: i32, }
}

wire_struct! {
    /// `struct fuse_statx`.
    pub struct Statx(256) {
        pub mask: u32,
        pub blksize: u32,
        pub attributes: u64,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub mode: u16,
        pub spare0: u16,
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub attributes_mask: u64,
        pub atime: SxTime,
        pub btime: SxTime,
        pub ctime: SxTime,
        pub mtime: SxTime,
        pub rdev_major: u32,
        pub rdev_minor: u32,
        pub dev_major: u32,
        pub dev_minor: u32,
        pub spare2: [u32; 28],
    }
}

wire_struct! {
    /// `struct fuse_statx_out`.
    pub struct StatxOut(288) {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub flags: u32,
        pub spare0: u64,
        pub spare1: u64,
        pub stat: Statx,
    }
}

/// Size of `fuse_setxattr_in` when FUSE_SETXATTR_EXT is not negotiated.
pub const COMPAT_SETXATTR_IN_SIZE: usize = 8;
/// Size of the `fuse_init_in` sent by kernels older than 7.36.
pub const COMPAT_INIT_IN_SIZE: usize = 16;

/// Rounds a dirent record up to the 8-byte alignment the kernel expects.
pub const fn dirent_align(len: usize) -> usize {
    (len + 7) & !7
}

/// Opcodes (`enum fuse_opcode`).
pub mod opcode {
    #![allow(missing_docs)]
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SETUPMAPPING: u32 = 48;
    pub const REMOVEMAPPING: u32 = 49;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
}

/// INIT flags (`fuse_init_in.flags`, and `flags2 << 32` with FUSE_INIT_EXT).
pub mod init_flags {
    #![allow(missing_docs)]
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const FILE_OPS: u64 = 1 << 2;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const EXPORT_SUPPORT: u64 = 1 << 4;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const SPLICE_WRITE: u64 = 1 << 7;
    pub const SPLICE_MOVE: u64 = 1 << 8;
    pub const SPLICE_READ: u64 = 1 << 9;
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const HANDLE_KILLPRIV: u64 = 1 << 19;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const ABORT_ERROR: u64 = 1 << 21;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const EXPLICIT_INVAL_DATA: u64 = 1 << 25;
    pub const MAP_ALIGNMENT: u64 = 1 << 26;
    pub const SUBMOUNTS: u64 = 1 << 27;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const SETXATTR_EXT: u64 = 1 << 29;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const INIT_RESERVED: u64 = 1 << 31;
    pub const SECURITY_CTX: u64 = 1 << 32;
    pub const HAS_INODE_DAX: u64 = 1 << 33;
    pub const CREATE_SUPP_GROUP: u64 = 1 << 34;
    pub const HAS_EXPIRE_ONLY: u64 = 1 << 35;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
    pub const PASSTHROUGH: u64 = 1 << 37;
    pub const NO_EXPORT_SUPPORT: u64 = 1 << 38;
    pub const HAS_RESEND: u64 = 1 << 39;
    pub const ALLOW_IDMAP: u64 = 1 << 40;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    #![allow(missing_docs)]
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_out.open_flags` bits.
pub mod fopen {
    #![allow(missing_docs)]
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NONSEEKABLE: u32 = 1 << 2;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const STREAM: u32 = 1 << 4;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
    pub const PASSTHROUGH: u32 = 1 << 7;
}

/// Miscellaneous request flags.
pub mod flags {
    #![allow(missing_docs)]
    pub const RELEASE_FLUSH: u32 = 1 << 0;
    pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
    pub const GETATTR_FH: u32 = 1 << 0;
    pub const LK_FLOCK: u32 = 1 << 0;
    pub const WRITE_CACHE: u32 = 1 << 0;
    pub const WRITE_LOCKOWNER: u32 = 1 << 1;
    pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
    pub const READ_LOCKOWNER: u32 = 1 << 1;
    pub const FSYNC_FDATASYNC: u32 = 1 << 0;
    pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;
    pub const SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
    pub const RENAME_NOREPLACE: u32 = 1 << 0;
    pub const RENAME_EXCHANGE: u32 = 1 << 1;
    pub const RENAME_WHITEOUT: u32 = 1 << 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = InHeader {
            len: 41,
            opcode: opcode::LOOKUP,
            unique: 0x0102_0304_0506_0708,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 7,
            total_extlen: 0,
            padding: 0,
        };
        let b = h.to_bytes();
        assert_eq!(b.len(), InHeader::SIZE);
        assert_eq!(&b[0..4], &41u32.to_le_bytes());
        assert_eq!(InHeader::from_bytes(&b), Some(h));
        assert_eq!(InHeader::from_bytes(&b[..39]), None);
    }

    #[test]
    fn nested_and_array_fields() {
        let mut e = EntryOut::default();
        e.attr.flags = 0xdead_beef;
        e.nodeid = 9;
        let b = e.to_bytes();
        assert_eq!(b.len(), 128);
        assert_eq!(&b[124..128], &0xdead_beefu32.to_le_bytes());
        let mut i = InitIn::default();
        i.unused[10] = 5;
        let b = i.to_bytes();
        assert_eq!(&b[60..64], &5u32.to_le_bytes());
        assert_eq!(InitIn::from_bytes(&b), Some(i));
    }

    #[test]
    fn alignment() {
        assert_eq!(dirent_align(24 + 1), 32);
        assert_eq!(dirent_align(32), 32);
    }
}
