//! Integration tests of the `payhook-bench` binary: the real executable as a child process, against a payhook
//! server in the test's process on a SQLite file in a temp dir.

mod bench;
mod helpers;
mod prefill;
