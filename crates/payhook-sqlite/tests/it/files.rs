//! The database's files are private to the user payhook runs as.

use crate::TempStore;
use payhook_store::contract::{T0, ingest, new_order, pay, processed, register_new, test_policy};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// A new database file, and the `-wal` and `-shm` files SQLite creates beside it, can be read and written by their
/// owner only, whatever the umask lets through: they hold every delivery's raw body and headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_database_and_its_wal_and_shm_files_are_readable_by_their_owner_only() {
    let store = TempStore::open(test_policy());
    let dir = store.path().parent().expect("the file's directory").to_owned();
    // Without this the test would prove nothing: a file created as usual must come out readable by others.
    let control = dir.join("control");
    std::fs::write(&control, b"").unwrap();
    assert_ne!(mode(&control) & 0o044, 0, "run this test under a umask that lets others read (such as 0022)");

    register_new(&store, new_order("ord_m1", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_m1", "ord_m1", 100, T0 + 1)).await, processed());
    for suffix in ["", "-wal", "-shm"] {
        let mut name = store.path().as_os_str().to_owned();
        name.push(suffix);
        assert_eq!(mode(Path::new(&name)), 0o600, "payhook.db{suffix} is {:o}", mode(Path::new(&name)));
    }
}
