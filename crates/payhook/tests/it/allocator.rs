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

/// mimalloc's `no_thp` feature: mimalloc does not ask for transparent huge pages (`madvise(MADV_HUGEPAGE)`) for its
/// memory. With them, each page it took afresh after returning memory was a 2 MiB huge page the kernel zeroed: 2 %
/// of the server's CPU with trace export on, on the writer's SQLite allocations too, and a third of its peak
/// resident set (BENCHMARKS.md, *Memory*). Under the kernel's `madvise` mode (the usual default) the server then holds
/// no huge page at all; without the feature it holds several megabytes of them as soon as it has started.
#[tokio::test]
async fn the_server_holds_no_transparent_huge_page() {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !mode.contains("[madvise]") {
        eprintln!("SKIPPED: transparent huge pages are not in `madvise` mode here ({})", mode.trim());
        return;
    }
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let memory = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", server.pid())).expect("smaps_rollup");
    let huge = memory.lines().find(|l| l.starts_with("AnonHugePages:")).map(|l| l.split_whitespace().nth(1));
    assert_eq!(huge, Some(Some("0")), "mimalloc's `no_thp` feature is off: {memory}");
}
