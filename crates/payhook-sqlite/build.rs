//! Compiles payhook's SQLite VFS (`csrc/wal_vfs.c`: each WAL frame written with one call instead of two;
//! ARCHITECTURE.md, *Decisions*) and its wrapper of SQLite's page cache (`csrc/page_cache.c`: no scan of the cache
//! for a truncation that cannot drop anything) against the header of the SQLite that rusqlite bundles.
//!
//! The library is linked whole: nothing in Rust calls into it (a constructor registers the VFS when the program
//! starts), so a linker that only pulls in referenced objects would leave it out.

fn main() {
    println!("cargo:rerun-if-changed=csrc/wal_vfs.c");
    println!("cargo:rerun-if-changed=csrc/page_cache.c");
    let include = std::env::var("DEP_SQLITE3_INCLUDE")
        .expect("libsqlite3-sys with its `bundled` feature names the directory of the SQLite it compiles");
    cc::Build::new()
        .file("csrc/wal_vfs.c")
        .file("csrc/page_cache.c")
        .include(include)
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .warnings_into_errors(true)
        .cargo_metadata(false)
        .compile("payhook_wal_vfs");
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    println!("cargo:rustc-link-search=native={out_dir}");
    println!("cargo:rustc-link-lib=static:+whole-archive=payhook_wal_vfs");
}
