//! Compiles the store contract suite into the integration tests only when a test database is configured.
//!
//! `payhook_store::store_contract_tests!` expands to one test per case, each of which must get a working store,
//! so without PostgreSQL they cannot skip themselves; instead `cfg(payhook_test_postgres)` leaves them out and a
//! single test says that they were skipped. Every other PostgreSQL test checks the variable at run time.

fn main() {
    println!("cargo::rerun-if-env-changed=PAYHOOK_TEST_POSTGRES_URL");
    println!("cargo::rustc-check-cfg=cfg(payhook_test_postgres)");
    if std::env::var_os("PAYHOOK_TEST_POSTGRES_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=payhook_test_postgres");
    }
}
