//! The FUSE side: inode numbers for paths under the backing directory, open file handles, and every operation
//! passed through to the backing files, with writes and truncations first recorded in each file's [`Unsynced`].

use crate::undo::{Unsynced, read_full};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenAccMode,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `O_EXCL` on Linux (the only system this mounts on).
const O_EXCL: i32 = 0o200;

/// Entries and attributes are never cached by the kernel: after a cut, sizes and entries must be asked again.
const TTL: Duration = Duration::ZERO;

/// Everything the file system knows, behind one lock: a cut and a write never interleave.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Inode number → path relative to the backing directory (the root is `""`, inode 1).
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, (u64, Arc<File>)>,
    next_fh: u64,
    /// Files written, truncated or created through the mount since their last sync.
    pub(crate) files: HashMap<u64, Unsynced>,
}

impl State {
    fn ino(&mut self, path: &Path) -> u64 {
        if let Some(&ino) = self.inodes.get(path) {
            return ino;
        }
        self.next_ino = self.next_ino.max(1) + 1;
        let ino = self.next_ino;
        self.paths.insert(ino, path.to_owned());
        self.inodes.insert(path.to_owned(), ino);
        ino
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        if ino.0 == 1 {
            return Ok(PathBuf::new());
        }
        self.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    /// Forgets a path that no longer exists (unlinked, or removed by a cut).
    pub(crate) fn forget_path(&mut self, path: &Path) -> Option<u64> {
        let ino = self.inodes.remove(path)?;
        self.paths.remove(&ino);
        self.files.remove(&ino);
        Some(ino)
    }

    pub(crate) fn path_of(&self, ino: u64) -> Option<&Path> {
        self.paths.get(&ino).map(PathBuf::as_path)
    }

    /// The undo record of `ino`, starting one for a file first changed through the mount.
    fn unsynced(&mut self, ino: u64, file: &File) -> io::Result<&mut Unsynced> {
        match self.files.entry(ino) {
            Entry::Occupied(known) => Ok(known.into_mut()),
            Entry::Vacant(first) => Ok(first.insert(Unsynced::synced(file.metadata()?.len()))),
        }
    }
}

/// The file system: a backing directory and the shared [`State`].
#[derive(Debug)]
pub(crate) struct PowerCutFs {
    pub(crate) backing: PathBuf,
    pub(crate) state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn time(secs: i64, nanos: i64) -> SystemTime {
    let at = Duration::new(secs.unsigned_abs(), nanos.clamp(0, 999_999_999) as u32);
    if secs >= 0 { UNIX_EPOCH + at } else { UNIX_EPOCH - at }
}

fn attr(ino: u64, meta: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: time(meta.ctime(), meta.ctime_nsec()),
        kind: FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

impl PowerCutFs {
    fn real(&self, path: &Path) -> PathBuf {
        self.backing.join(path)
    }

    fn handle(&self, fh: FileHandle) -> Result<(u64, Arc<File>), Errno> {
        lock(&self.state).handles.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn stat(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let path = lock(&self.state).path(ino)?;
        let meta = std::fs::symlink_metadata(self.real(&path))?;
        Ok(attr(ino.0, &meta))
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(lock(&self.state).path(parent)?.join(name))
    }

    fn entry(&self, path: &Path) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(self.real(path))?;
        let ino = lock(&self.state).ino(path);
        Ok(attr(ino, &meta))
    }

    fn open_handle(&self, ino: u64, file: File) -> FileHandle {
        let mut state = lock(&self.state);
        state.next_fh += 1;
        let fh = state.next_fh;
        state.handles.insert(fh, (ino, Arc::new(file)));
        FileHandle(fh)
    }

    fn truncate(&self, ino: INodeNo, fh: Option<FileHandle>, size: u64) -> Result<(), Errno> {
        let file = match fh {
            Some(fh) => self.handle(fh)?.1,
            None => {
                let path = lock(&self.state).path(ino)?;
                Arc::new(OpenOptions::new().read(true).write(true).open(self.real(&path))?)
            }
        };
        let mut state = lock(&self.state);
        state.unsynced(ino.0, &file)?.before_truncate(&file, size)?;
        file.set_len(size)?;
        Ok(())
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let mut options = OpenOptions::new();
    // A writer's handle reads too: the undo log reads a page's synced bytes through it before overwriting them.
    match OpenFlags(flags).acc_mode() {
        OpenAccMode::O_RDONLY => options.read(true),
        _ => options.read(true).write(true),
    };
    options
}

impl Filesystem for PowerCutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|path| self.entry(&path)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| {
            if let Some(size) = size {
                self.truncate(ino, fh, size)?;
            }
            if let Some(mode) = mode {
                let path = lock(&self.state).path(ino)?;
                std::fs::set_permissions(self.real(&path), std::fs::Permissions::from_mode(mode & 0o7777))?;
            }
            self.stat(ino)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let result = self.child(parent, name).and_then(|path| {
            std::fs::create_dir(self.real(&path))?;
            std::fs::set_permissions(self.real(&path), std::fs::Permissions::from_mode(mode & !umask & 0o7777))?;
            self.entry(&path)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.child(parent, name).and_then(|path| {
            std::fs::remove_file(self.real(&path))?;
            lock(&self.state).forget_path(&path);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.child(parent, name).and_then(|path| {
            std::fs::remove_dir(self.real(&path))?;
            lock(&self.state).forget_path(&path);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            // Files only: a directory's descendants would keep their old paths here.
            if std::fs::symlink_metadata(self.real(&from))?.is_dir() {
                return Err(Errno::EXDEV);
            }
            std::fs::rename(self.real(&from), self.real(&to))?;
            let mut state = lock(&self.state);
            state.forget_path(&to);
            if let Some(ino) = state.inodes.remove(&from) {
                state.paths.insert(ino, to.clone());
                state.inodes.insert(to, ino);
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = (|| {
            let path = lock(&self.state).path(ino)?;
            let file = open_options(flags.0).open(self.real(&path))?;
            Ok::<_, Errno>(self.open_handle(ino.0, file))
        })();
        match result {
            // No FOPEN_KEEP_CACHE: every open drops the kernel's cached pages, which may predate a cut.
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| {
            let path = self.child(parent, name)?;
            let real = self.real(&path);
            let existed = real.exists();
            let mut options = open_options(flags);
            options.create(true).mode(mode & !umask & 0o7777);
            if flags & O_EXCL != 0 {
                options.create_new(true);
            }
            let file = options.open(&real)?;
            let attr = attr(0, &file.metadata()?);
            let ino = {
                let mut state = lock(&self.state);
                let ino = state.ino(&path);
                if !existed {
                    state.files.insert(ino, Unsynced::created());
                }
                ino
            };
            let fh = self.open_handle(ino, file);
            Ok::<_, Errno>((FileAttr { ino: INodeNo(ino), ..attr }, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.handle(fh).and_then(|(_, file)| {
            let mut buf = vec![0; size as usize];
            let n = read_full(&file, &mut buf, offset)?;
            buf.truncate(n);
            Ok(buf)
        });
        match result {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.handle(fh).and_then(|(ino, file)| {
            // Under the lock: the undo record and the write happen together, never split by a cut.
            let mut state = lock(&self.state);
            if state.paths.contains_key(&ino) {
                state.unsynced(ino, &file)?.before_write(&file, offset, data.len() as u64)?;
            }
            file.write_all_at(data, offset)?;
            Ok(data.len() as u32)
        });
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.state).handles.remove(&fh.0);
        reply.ok();
    }

    /// fsync and fdatasync alike make the file's current contents and length what a cut keeps. The backing file
    /// itself is not synced: the model's record is what a cut restores, not the test machine's disk.
    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let result = self.handle(fh).and_then(|(ino, file)| {
            let len = file.metadata()?.len();
            let mut state = lock(&self.state);
            if state.paths.contains_key(&ino) {
                state.unsynced(ino, &file)?.mark_synced(len);
            }
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let result = (|| {
            let dir = lock(&self.state).path(ino)?;
            let mut entries = vec![(ino.0, FileType::Directory, ".".into()), (ino.0, FileType::Directory, "..".into())];
            for entry in std::fs::read_dir(self.real(&dir))? {
                let entry = entry?;
                let kind = FileType::from_std(entry.file_type()?).unwrap_or(FileType::RegularFile);
                let child = lock(&self.state).ino(&dir.join(entry.file_name()));
                entries.push((child, kind, entry.file_name()));
            }
            Ok::<_, Errno>(entries)
        })();
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    /// A directory sync makes the entries of the files in it durable (files created since are no longer removed
    /// by a cut); their contents still follow their own syncs.
    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut state = lock(&self.state);
        match state.path(ino) {
            Ok(dir) => {
                let children: Vec<u64> = state
                    .files
                    .keys()
                    .copied()
                    .filter(|f| state.paths.get(f).and_then(|p| p.parent()) == Some(dir.as_path()))
                    .collect();
                for child in children {
                    if let Some(u) = state.files.get_mut(&child) {
                        u.mark_entry_synced();
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Plenty of room: the tests' files are small, and nothing here reads these numbers closely.
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }
}
