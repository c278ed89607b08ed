//! The binary's allocator: mimalloc with its `override` feature defines the process's `malloc`, `calloc`,
//! `realloc` and `free`, so the allocations of the bundled SQLite go to mimalloc's per-thread heaps as well as
//! Rust's (ARCHITECTURE.md, dependencies; decision records in docs/decisions/; the measurement is in BENCHMARKS.md's history, *SQLite's allocations through mimalloc*). Without the
//! feature the binary still runs and passes every other test, its SQLite calling the C library's allocator: only
//! the binary's symbol table tells the two apart.

use crate::helpers::{Server, TestDir};
use std::process::Command;

#[test]
fn the_binary_defines_malloc_and_free_so_that_sqlite_allocates_through_mimalloc() {
    let bin = env!("CARGO_BIN_EXE_payhook");
    let out = Command::new("nm")
        .args(["--defined-only", bin])
        .output()
        .expect("run nm (binutils, which the Rust toolchain's linker comes with)");
    assert!(out.status.success(), "nm {bin}: {}", String::from_utf8_lossy(&out.stderr));
    let symbols = String::from_utf8_lossy(&out.stdout);
    // A defined text symbol: "ADDRESS T NAME". Taken from the C library instead, it is listed as undefined
    // ("U malloc@GLIBC_…") and `--defined-only` leaves it out.
    let defined = |name: &str| {
        symbols.lines().any(|l| {
            let mut fields = l.split_whitespace().skip(1);
            fields.next() == Some("T") && fields.next() == Some(name) && fields.next().is_none()
        })
    };
    for name in ["malloc", "calloc", "realloc", "free"] {
        assert!(defined(name), "{bin} takes `{name}` from the C library: mimalloc's `override` feature is off");
    }
    // The check can fail: SQLite's own allocation routine is in the binary, and it calls `malloc`.
    assert!(symbols.lines().any(|l| l.ends_with(" sqlite3MemMalloc")), "{bin} has no bundled SQLite");
}

/// mimalloc's `no_thp` feature: its heaps take no transparent huge pages (mimalloc turns them off for the process,
/// `PR_SET_THP_DISABLE`, which `/proc/PID/status` shows as `THP_enabled: 0`). With them, each page mimalloc takes
/// afresh after returning memory was a 2 MiB huge page the kernel zeroed: 2 % of the server's CPU with trace export
/// on, spent on the writer's SQLite allocations too, and a third of its peak resident set (BENCHMARKS.md, *Trace
/// export*).
#[tokio::test]
async fn the_server_runs_without_transparent_huge_pages() {
    let kernel_says = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    if !kernel_says.contains("THP_enabled:") {
        eprintln!("SKIPPED: this kernel does not report THP_enabled in /proc/PID/status");
        return;
    }
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("the server's status");
    let thp = status.lines().find(|l| l.starts_with("THP_enabled:")).map(|l| l.split_whitespace().last());
    assert_eq!(thp, Some(Some("0")), "mimalloc's `no_thp` feature is off: {status}");
}
