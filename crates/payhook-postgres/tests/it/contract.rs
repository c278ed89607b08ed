//! The store contract, run against PostgreSQL: each case gets a schema of its own.

use crate::{TempStore, URL_VAR};

payhook_store::store_contract_tests!(|policy| {
    let url = std::env::var(URL_VAR).expect("the contract is compiled in only when the variable is set");
    TempStore::open(&url, policy).await
});

/// The same contract with group commit off: one transaction (and one commit) per event.
mod one_commit_per_event {
    use crate::{TempStore, URL_VAR};

    payhook_store::store_contract_tests!(|policy| {
        let url = std::env::var(URL_VAR).expect("the contract is compiled in only when the variable is set");
        TempStore::open_with(&url, policy, |options| options.batch_max = 1).await
    });
}
