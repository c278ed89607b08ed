//! Integration tests of the `payhook` binary: the real executable as child processes, on real SQLite files in
//! temp dirs, driven over HTTP and its command line.

mod admin_cli;
mod allocator;
mod audit;
mod cli;
mod crash;
mod declared;
mod docs;
mod failover;
mod helpers;
mod hostile;
mod install;
mod interop;
mod interop_crate;
mod postgres;
mod postgres_order;
mod powercut;
mod provider;
mod reload;
mod replication;
mod secrets;
mod serve;
mod traces;
