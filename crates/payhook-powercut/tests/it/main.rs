//! The power-cut file system through the kernel: real files on a real mount, written, synced and cut.
//! Each test skips (printing why) where no FUSE mount can be made, unless `PAYHOOK_TEST_POWERCUT=1`.

use payhook_powercut::{Mount, mount_for_test};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use tempfile::TempDir;

struct Fixture {
    mount: Mount,
    _dirs: (TempDir, TempDir),
}

impl Fixture {
    fn new() -> Option<Self> {
        let backing = tempfile::tempdir().expect("backing dir");
        let at = tempfile::tempdir().expect("mount point");
        let mount = mount_for_test(backing.path(), at.path())?;
        Some(Self { mount, _dirs: (backing, at) })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.mount.path().join(name)
    }
}

fn read(path: &PathBuf) -> Vec<u8> {
    let mut bytes = Vec::new();
    File::open(path).expect("open").read_to_end(&mut bytes).expect("read");
    bytes
}

fn open_rw(path: &PathBuf) -> File {
    OpenOptions::new().read(true).write(true).open(path).expect("open read-write")
}

#[test]
fn a_cut_keeps_what_was_synced_and_drops_what_was_written_after() {
    let Some(fx) = Fixture::new() else { return };
    let path = fx.file("data");
    let mut f = File::create(&path).expect("create");
    f.write_all(&[1u8; 10_000]).expect("write");
    f.sync_data().expect("fdatasync");
    f.seek(SeekFrom::Start(5000)).expect("seek");
    f.write_all(&[2u8; 20_000]).expect("write more");
    drop(f);
    assert_eq!(read(&path).len(), 25_000, "before the cut the unsynced writes are visible");

    let cut = fx.mount.power_cut().expect("cut");
    assert_eq!((cut.files_restored, cut.files_removed), (1, 0), "{cut:?}");
    assert_eq!(read(&path), vec![1u8; 10_000], "the synced contents and length, nothing after");
}

#[test]
fn fsync_counts_like_fdatasync_and_a_second_cut_changes_nothing() {
    let Some(fx) = Fixture::new() else { return };
    let path = fx.file("data");
    let mut f = File::create(&path).expect("create");
    f.write_all(b"first").expect("write");
    f.sync_all().expect("fsync");
    f.write_all(b" second").expect("write");
    f.sync_all().expect("fsync");
    f.write_all(b" lost").expect("write");
    drop(f);
    fx.mount.power_cut().expect("cut");
    assert_eq!(read(&path), b"first second");
    fx.mount.power_cut().expect("second cut");
    assert_eq!(read(&path), b"first second");
    assert_eq!(fx.mount.saved_bytes(), 0, "a cut leaves no undo log behind");
}

#[test]
fn a_truncate_after_the_sync_is_undone_and_so_is_an_extension() {
    let Some(fx) = Fixture::new() else { return };
    let shrunk = fx.file("shrunk");
    let grown = fx.file("grown");
    let synced: Vec<u8> = (0..9000u32).map(|i| (i % 253) as u8).collect();
    for path in [&shrunk, &grown] {
        let mut f = File::create(path).expect("create");
        f.write_all(&synced).expect("write");
        f.sync_all().expect("fsync");
    }
    let f = open_rw(&shrunk);
    f.set_len(10).expect("truncate");
    f.set_len(50_000).expect("extend with zeros");
    drop(f);
    open_rw(&grown).set_len(1 << 20).expect("extend");
    assert_eq!(read(&shrunk).len(), 50_000);

    let cut = fx.mount.power_cut().expect("cut");
    assert_eq!(cut.files_restored, 2, "{cut:?}");
    assert_eq!(read(&shrunk), synced, "the truncated bytes come back");
    assert_eq!(read(&grown), synced, "the extension is gone");
}

#[test]
fn a_file_created_after_the_last_sync_is_gone_unless_it_or_its_directory_was_synced() {
    let Some(fx) = Fixture::new() else { return };
    let never = fx.file("never-synced");
    let synced = fx.file("synced");
    std::fs::write(&never, b"lost").expect("write");
    let mut f = File::create(&synced).expect("create");
    f.write_all(b"kept").expect("write");
    f.sync_data().expect("fdatasync");
    drop(f);
    std::fs::create_dir(fx.file("dir")).expect("mkdir");
    let in_synced_dir = fx.file("dir/entry-synced");
    std::fs::write(&in_synced_dir, b"contents not synced").expect("write");
    File::open(fx.file("dir")).expect("open dir").sync_all().expect("fsync the directory");

    let cut = fx.mount.power_cut().expect("cut");
    assert_eq!(cut.files_removed, 1, "{cut:?}");
    assert!(!never.exists(), "a file never synced does not survive a cut");
    assert_eq!(read(&synced), b"kept");
    assert!(in_synced_dir.exists(), "its directory's sync keeps the entry");
    assert_eq!(read(&in_synced_dir), b"", "but not the contents, which were never synced");
}

#[test]
fn a_reader_open_across_the_cut_sees_the_synced_contents_not_cached_pages() {
    let Some(fx) = Fixture::new() else { return };
    let path = fx.file("shared");
    let mut f = File::create(&path).expect("create");
    f.write_all(&[0u8; 8192]).expect("write");
    f.sync_data().expect("fdatasync");
    drop(f);
    use std::os::unix::fs::FileExt;
    let reader = File::open(&path).expect("a reader open across the cut");
    let mut buf = vec![1u8; 8192];
    reader.read_exact_at(&mut buf, 0).expect("read before the write: the kernel caches the pages");
    let f = open_rw(&path);
    f.write_all_at(&[9u8; 4096], 4096).expect("write a whole page, which the kernel's cache takes as it is");
    drop(f);
    reader.read_exact_at(&mut buf, 0).expect("read before the cut");
    assert_eq!(buf[4096..], [9u8; 4096], "before the cut the write is visible");
    fx.mount.power_cut().expect("cut");
    reader.read_exact_at(&mut buf, 0).expect("read after the cut");
    assert_eq!(buf, vec![0u8; 8192], "no page cached before the cut is served after it");
}
