//! The store contract, run against PostgreSQL: each case gets a schema of its own, configured with the case's
//! retry policy and sink routing.

use crate::{TempStore, URL_VAR};

payhook_store::store_contract_tests!(|setup| {
    let url = std::env::var(URL_VAR).expect("the contract is compiled in only when the variable is set");
    TempStore::open_with(&url, setup.retry, |options| {
        options.routing = setup.routing;
        options.list_scan_rows = setup.list_scan_rows;
    })
    .await
});

/// The same contract with group commit off: one transaction (and one commit) per event.
mod one_commit_per_event {
    use crate::{TempStore, URL_VAR};

    payhook_store::store_contract_tests!(|setup| {
        let url = std::env::var(URL_VAR).expect("the contract is compiled in only when the variable is set");
        TempStore::open_with(&url, setup.retry, |options| {
            options.routing = setup.routing;
            options.list_scan_rows = setup.list_scan_rows;
            options.batch_max = 1;
        })
        .await
    });
}
