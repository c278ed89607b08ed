//! The module layering ARCHITECTURE.md promises, read from the `use` lines: `request` and `template` sit below
//! `signature` and `format`, and `signature` (which verifies) never reads `format` (which reads what was verified).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::…` path the files under `module` (a file or a directory of `src/`) name, with the file naming it.
fn crate_paths(module: &str) -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let dir = src.join(module);
    if dir.is_dir() {
        sources(&dir, &mut files);
    } else {
        files.push(src.join(format!("{module}.rs")));
    }
    assert!(!files.is_empty(), "no sources for {module}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for (at, _) in text.match_indices("crate::") {
            // Doc links may point anywhere; only code is layered.
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            if text[line_start..].trim_start().starts_with("//") {
                continue;
            }
            let path: String =
                text[at + "crate::".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            found.push((file.display().to_string(), path));
        }
    }
    found
}

#[test]
fn signature_never_imports_format() {
    let upward: Vec<_> = crate_paths("signature").into_iter().filter(|(_, path)| path == "format").collect();
    assert!(upward.is_empty(), "signature/ reaches up into format: {upward:?}");
}

#[test]
fn request_and_template_import_neither_signature_nor_format() {
    for module in ["request", "template"] {
        let upward: Vec<_> =
            crate_paths(module).into_iter().filter(|(_, path)| path == "signature" || path == "format").collect();
        assert!(upward.is_empty(), "{module} reaches up: {upward:?}");
    }
}

#[test]
fn the_layering_check_sees_the_imports_it_looks_for() {
    // format reads the request's headers from `crate::request`: a check that found nothing here would be blind.
    assert!(crate_paths("format").iter().any(|(_, path)| path == "request"));
}
