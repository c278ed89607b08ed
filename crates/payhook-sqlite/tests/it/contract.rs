//! The store contract, run against SQLite: each case gets a new database file.

use crate::TempStore;

payhook_store::store_contract_tests!(|setup| TempStore::open_with(|options| {
    options.retry = setup.retry;
    options.routing = setup.routing;
    options.list_scan_rows = setup.list_scan_rows;
}));

/// The same contract with `synchronous = FULL` inside `COMMIT` instead of the pipelined WAL syncer.
mod sync_in_commit {
    use crate::TempStore;
    use payhook_sqlite::CommitSync;

    payhook_store::store_contract_tests!(|setup| TempStore::open_with(|options| {
        options.retry = setup.retry;
        options.routing = setup.routing;
        options.list_scan_rows = setup.list_scan_rows;
        options.sync = CommitSync::InCommit;
    }));
}
