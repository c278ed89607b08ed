//! Compiles every provider preset (`presets/NAME.toml`) into the crate: adding a provider is adding a file.

use std::fmt::Write as _;

fn main() {
    println!("cargo:rerun-if-changed=presets");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("presets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".toml")).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut out =
        String::from("/// Every preset file, by name, sorted.\npub(crate) const FILES: &[(&str, &str)] = &[\n");
    for name in &names {
        println!("cargo:rerun-if-changed=presets/{name}.toml");
        let path = dir.join(format!("{name}.toml"));
        let _ = writeln!(out, "    ({name:?}, include_str!({:?})),", path.display().to_string());
    }
    out.push_str("];\n");
    let target = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo")).join("presets.rs");
    std::fs::write(target, out).expect("write presets.rs");
}
