//! A file system for tests that can lose power.
//!
//! `kill -9` cannot show a missing fsync: the page cache outlives the killed process, so whatever it wrote is
//! still there when it restarts. [`Mount`] mounts a small FUSE file system that passes reads and writes through to
//! a backing directory, but keeps, for every file, its state at its last `fsync`/`fdatasync`: its length then,
//! and the synced contents of every 4 KiB page changed since (an undo log, in memory). [`Mount::power_cut`]
//! drops everything not synced: each file returns to its last synced contents and length. A test kills the
//! processes using the mount first, then cuts, then starts them again on what a machine would have after a power
//! failure.
//!
//! What it models:
//! - `fsync` and `fdatasync` alike make a file's current contents and length durable (on any of its handles).
//! - A file created through the mount and never synced is removed by a cut, unless its directory was synced
//!   (`fsyncdir`) since: the stricter of the choices a real file system may make. A synced file stays.
//! - Files already in the backing directory when it is mounted count as synced.
//!
//! What it does not model (documented limits, not bugs):
//! - Directory entries beyond that rule: `unlink`, `mkdir`, `rmdir` and `rename` are durable at once (no
//!   rename rolled back, no unlinked file brought back). Renaming a directory is refused (`EXDEV`).
//! - Torn or reordered writes: a cut keeps whole synced states only, never half a page or a later write
//!   without an earlier one. Unsynced data is lost entirely, the worst case of each page's fate but not the
//!   mixed ones a disk can produce.
//! - `fallocate` is not offered (the kernel answers `EOPNOTSUPP`, and callers fall back to writes).
//! - Locks are the kernel's own (no `setlk`/`getlk` here), which is exact for processes of one machine.
//!   Shared memory maps (SQLite's `-shm`) work through the kernel's page cache as on any FUSE mount.
//!
//! Layout: `undo` is the model of one file (tested without FUSE), `fs` the FUSE operations, this file the mount.
//! Mounting needs `/dev/fuse` and root (the mount is made with mount(2), no `fusermount3`).

mod fs;
pub mod undo;

use fs::{PowerCutFs, State};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What one [`Mount::power_cut`] dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    /// Files put back to their last synced contents and length.
    pub files_restored: usize,
    /// Pages whose unsynced contents were replaced by their synced ones.
    pub pages_restored: usize,
    /// Bytes past files' synced lengths, cut off.
    pub bytes_cut_off: u64,
    /// Files created and never synced, removed.
    pub files_removed: usize,
}

/// The file system, mounted at [`Mount::path`] over a backing directory. Unmounted on drop.
#[derive(Debug)]
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    state: Arc<Mutex<State>>,
    backing: PathBuf,
    path: PathBuf,
}

impl Mount {
    /// Mounts the file system at `path` (an empty directory) over `backing` (a directory on a real file system).
    pub fn new(backing: &Path, path: &Path) -> io::Result<Self> {
        let state = Arc::new(Mutex::new(State::default()));
        let fs = PowerCutFs { backing: backing.to_owned(), state: Arc::clone(&state) };
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName("payhook-powercut".into())];
        config.n_threads = Some(2);
        let session = fuser::Session::new(fs, path, &config)?.spawn()?;
        Ok(Self { session: Some(session), state, backing: backing.to_owned(), path: path.to_owned() })
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops every write not synced: each file changed since its last sync returns to its synced contents and
    /// length, each file created and never synced is removed. Kill the processes using the mount first: a
    /// process that lives through a cut keeps whatever its own memory holds (as it could not after a real one).
    pub fn power_cut(&self) -> io::Result<Cut> {
        let mut cut = Cut::default();
        let mut touched = Vec::new();
        {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let inos: Vec<u64> = state.files.keys().copied().collect();
            for ino in inos {
                let Some(path) = state.path_of(ino).map(Path::to_path_buf) else { continue };
                let real = self.backing.join(&path);
                let created = state.files.get(&ino).is_some_and(|u| u.is_created());
                if created {
                    match std::fs::remove_file(&real) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                    state.forget_path(&path);
                    cut.files_removed += 1;
                } else if let Some(unsynced) = state.files.get_mut(&ino) {
                    let file = std::fs::OpenOptions::new().read(true).write(true).open(&real)?;
                    let (pages, cut_off) = unsynced.restore(&file)?;
                    cut.pages_restored += pages;
                    cut.bytes_cut_off += cut_off;
                    cut.files_restored += 1;
                }
                touched.push(ino);
            }
        }
        // Outside the lock (the kernel may need the file system's threads to finish pending work first): no
        // cached page or size from before the cut may be served after it.
        if let Some(session) = &self.session {
            let notifier = session.notifier();
            for ino in touched {
                let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
            }
        }
        Ok(cut)
    }

    /// Bytes of synced contents held aside right now (the undo logs of all files).
    pub fn saved_bytes(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.files.values().map(undo::Unsynced::saved_bytes).sum()
    }
}

impl Drop for Mount {
    /// Unmounts lazily (`MNT_DETACH`) without waiting for the file system's threads: a file some process still
    /// holds open keeps the connection, and those threads, alive until it is closed, and a test must not hang on it.
    fn drop(&mut self) {
        drop(self.session.take());
    }
}

/// Whether a test that needs a mount must fail instead of skipping when none can be made
/// (`PAYHOOK_TEST_POWERCUT=1`, as CI sets it).
pub fn required() -> bool {
    std::env::var("PAYHOOK_TEST_POWERCUT").is_ok_and(|v| v == "1")
}

/// A mount for a test, over `backing` at `path`: `None` (after printing why) when this machine cannot mount one
/// and [`required`] is off; a panic when it is on.
pub fn mount_for_test(backing: &Path, path: &Path) -> Option<Mount> {
    let why = if !Path::new("/dev/fuse").exists() {
        "/dev/fuse is missing".to_owned()
    } else {
        match Mount::new(backing, path) {
            Ok(mount) => return Some(mount),
            Err(e) => format!("mounting the power-cut file system failed: {e}"),
        }
    };
    assert!(!required(), "PAYHOOK_TEST_POWERCUT=1 but {why}");
    eprintln!(
        "SKIPPED: {why} (the power-cut tests need /dev/fuse and root; PAYHOOK_TEST_POWERCUT=1 makes this a failure)"
    );
    None
}

impl Cut {
    /// Adds up the drops of several cuts.
    pub fn add(&mut self, other: Cut) {
        self.files_restored += other.files_restored;
        self.pages_restored += other.pages_restored;
        self.bytes_cut_off += other.bytes_cut_off;
        self.files_removed += other.files_removed;
    }
}
