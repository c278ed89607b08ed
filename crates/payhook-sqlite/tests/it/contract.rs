//! The store contract, run against SQLite: each case gets a new database file.

use crate::TempStore;

payhook_store::store_contract_tests!(|policy| TempStore::open(policy));

/// The same contract with `synchronous = FULL` inside `COMMIT` instead of the pipelined WAL syncer.
mod sync_in_commit {
    use crate::TempStore;
    use payhook_sqlite::CommitSync;

    payhook_store::store_contract_tests!(|policy| TempStore::open_with(|options| {
        options.retry = policy;
        options.sync = CommitSync::InCommit;
    }));
}
