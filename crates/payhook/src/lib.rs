//! The payhook binary's library part: its configuration loader, shared by the binary and the fuzz target that
//! feeds it arbitrary files.

pub mod config;
