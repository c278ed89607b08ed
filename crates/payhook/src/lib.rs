//! The payhook binary's library part: its configuration loader, shared by the binary, the fuzz target that feeds
//! it arbitrary files and the load generator (`payhook-bench`), and the opening of the configured database.

pub mod config;
pub mod store;
