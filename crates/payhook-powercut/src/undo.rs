//! The model of one file across a power cut: its length at the last fsync/fdatasync and, for every 4 KiB page
//! changed since, that page's synced contents (an undo log). Writes and truncations call in here *before* they
//! change the backing file; [`Unsynced::restore`] puts the synced state back.
//!
//! Why the saved bytes are the synced ones: a page is saved at its first change after a sync, and only writes and
//! truncations (which both save first) change a page, so until then its bytes below the synced length are those
//! of the sync. Bytes at or past the synced length need no saving: a restore truncates them away.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The unit of the undo log. A write smaller than a page still saves the whole page (its synced part).
pub const PAGE: u64 = 4096;

/// What a power cut would leave of one file.
#[derive(Debug)]
pub struct Unsynced {
    /// The length at the last sync.
    synced_len: u64,
    /// Page number → the page's synced bytes (only the part below `synced_len`).
    saved: BTreeMap<u64, Vec<u8>>,
    /// Created through the mount and never synced since: a cut removes it (see the crate docs).
    created: bool,
}

impl Unsynced {
    /// A file that exists, synced, with `len` bytes (a file found in the backing directory).
    pub fn synced(len: u64) -> Self {
        Self { synced_len: len, saved: BTreeMap::new(), created: false }
    }

    /// A file just created: nothing of it survives a cut until it is synced.
    pub fn created() -> Self {
        Self { synced_len: 0, saved: BTreeMap::new(), created: true }
    }

    /// Whether the file was created and not synced since.
    pub fn is_created(&self) -> bool {
        self.created
    }

    /// The length a cut restores.
    pub fn synced_len(&self) -> u64 {
        self.synced_len
    }

    /// Bytes of synced contents kept aside (the undo log's size).
    pub fn saved_bytes(&self) -> usize {
        self.saved.values().map(Vec::len).sum()
    }

    /// Call before writing `len` bytes at `offset` of `file`.
    pub fn before_write(&mut self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.save_range(file, offset, offset.saturating_add(len))
    }

    /// Call before setting `file`'s length to `new_len` (a shrink loses the bytes past it).
    pub fn before_truncate(&mut self, file: &File, new_len: u64) -> io::Result<()> {
        self.save_range(file, new_len, self.synced_len)
    }

    /// Saves every page of `[start, end)` below the synced length that is not saved yet.
    fn save_range(&mut self, file: &File, start: u64, end: u64) -> io::Result<()> {
        let end = end.min(self.synced_len);
        if start >= end {
            return Ok(());
        }
        for page in start / PAGE..end.div_ceil(PAGE) {
            if self.saved.contains_key(&page) {
                continue;
            }
            let at = page * PAGE;
            let mut bytes = vec![0; (self.synced_len - at).min(PAGE) as usize];
            let n = read_full(file, &mut bytes, at)?;
            // Shorter than the synced length only if someone changed the backing file behind the mount.
            bytes.truncate(n);
            self.saved.insert(page, bytes);
        }
        Ok(())
    }

    /// The file was synced (fsync or fdatasync) at length `len`: the undo log starts afresh.
    pub fn mark_synced(&mut self, len: u64) {
        self.synced_len = len;
        self.saved.clear();
        self.created = false;
    }

    /// Its directory was synced: the file's existence is durable (its contents still follow its own syncs).
    pub fn mark_entry_synced(&mut self) {
        self.created = false;
    }

    /// Puts the synced state back into `file`: its length, then every saved page. Returns the pages restored and
    /// the bytes past the synced length that were cut off.
    pub fn restore(&mut self, file: &File) -> io::Result<(usize, u64)> {
        let cut_off = file.metadata()?.len().saturating_sub(self.synced_len);
        file.set_len(self.synced_len)?;
        let pages = self.saved.len();
        for (page, bytes) in &self.saved {
            file.write_all_at(bytes, page * PAGE)?;
        }
        let len = self.synced_len;
        self.mark_synced(len);
        Ok((pages, cut_off))
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("temp file");
        f.write_all(bytes).expect("write");
        f
    }

    fn contents(f: &File) -> Vec<u8> {
        let len = f.metadata().expect("metadata").len() as usize;
        let mut buf = vec![0; len];
        let n = read_full(f, &mut buf, 0).expect("read");
        buf.truncate(n);
        buf
    }

    fn write(u: &mut Unsynced, f: &File, at: u64, bytes: &[u8]) {
        u.before_write(f, at, bytes.len() as u64).expect("save");
        f.write_all_at(bytes, at).expect("write");
    }

    #[test]
    fn a_restore_undoes_overwrites_and_appends_across_pages() {
        let synced: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let f = file_with(&synced);
        let mut u = Unsynced::synced(synced.len() as u64);
        write(&mut u, &f, 4000, &[0xAA; 300]); // straddles pages 0 and 1
        write(&mut u, &f, 9990, &[0xBB; 5000]); // overwrites the tail and extends
        assert_eq!(u.saved.len(), 3);
        assert_eq!(u.restore(&f).expect("restore"), (3, 4990));
        assert_eq!(contents(&f), synced);
    }

    #[test]
    fn a_shrink_then_a_regrow_restores_the_synced_bytes() {
        let synced = vec![7u8; 9000];
        let f = file_with(&synced);
        let mut u = Unsynced::synced(9000);
        u.before_truncate(&f, 100).expect("save");
        f.set_len(100).expect("shrink");
        write(&mut u, &f, 200, &[1; 10]);
        f.set_len(20_000).expect("grow");
        u.restore(&f).expect("restore");
        assert_eq!(contents(&f), synced);
    }

    #[test]
    fn a_sync_makes_the_written_bytes_the_ones_a_restore_keeps() {
        let f = file_with(b"hello");
        let mut u = Unsynced::synced(5);
        write(&mut u, &f, 5, b" world");
        u.mark_synced(11);
        write(&mut u, &f, 0, b"HELLO, WORLD!");
        u.restore(&f).expect("restore");
        assert_eq!(contents(&f), b"hello world");
        assert_eq!(u.saved_bytes(), 0);
    }
}
