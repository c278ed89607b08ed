//! payhook-server's layers, held against its source: every `crate::` path in `src/` names a module of its own
//! layer or of one below, through the layer's path (not a re-export of `lib.rs`), and no two modules import each
//! other, directly or around a circle. The layers, bottom up, are `lib.rs`'s list.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom up: a file may import from its own layer and the ones before it.
const LAYERS: [&str; 6] = ["base", "runtime", "state", "service", "http", "app"];

/// A module the import graph is drawn between: a layer and, below it, its module (`http::ui`, `state`).
type Unit = (String, String);

#[derive(Debug, PartialEq, Eq)]
enum Violation {
    /// A path that does not start with a layer (a re-export of `lib.rs`, or a module outside the layers).
    NotThroughALayer { file: String, path: String },
    /// An import of a higher layer.
    Upward { file: String, path: String },
    /// Modules that import each other around a circle.
    Cycle(Vec<String>),
}

/// The module path of a file under `src/`: `http/ui/mod.rs` is `["http", "ui"]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// The unit a module path (or an item's path) belongs to: the layer's module under it, or the layer itself when
/// it is one file (`state`, `app`), whose next segment is an item.
fn unit_of(path: &[String]) -> Unit {
    let single_file = matches!(path[0].as_str(), "state" | "app");
    let module = if single_file { String::new() } else { path.get(1).cloned().unwrap_or_default() };
    (path[0].clone(), module)
}

/// The code of a file without its comments (doc comments included): prose may name any module.
fn without_comments(source: &str) -> String {
    source.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// Every path a `crate::` prefix starts in `code`, with `use crate::{a::b, c::{d, e}}` groups expanded.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        let preceded_by_word = start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if preceded_by_word {
            continue;
        }
        let (paths, end) = parse_tree(code, from, Vec::new());
        out.extend(paths);
        from = end.max(from);
    }
    out
}

/// Parses one use-tree at `at` (a path, possibly ending in a `{...}` group) under `prefix`: its paths and where
/// it ends.
fn parse_tree(code: &str, mut at: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    loop {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == b'{' {
            let mut paths = Vec::new();
            at += 1;
            loop {
                while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == b'}' {
                    return (paths, at + 1);
                }
                let (inner, end) = parse_tree(code, at, prefix.clone());
                paths.extend(inner);
                at = end;
            }
        }
        let word_end =
            code[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(code.len(), |n| at + n);
        if word_end == at {
            return (if prefix.is_empty() { Vec::new() } else { vec![prefix] }, at);
        }
        prefix.push(code[at..word_end].to_owned());
        at = word_end;
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            return (vec![prefix], at);
        }
    }
}

/// The violations among `files` (path under `src/`, source).
fn check(files: &[(PathBuf, String)]) -> Vec<Violation> {
    let rank = |layer: &str| LAYERS.iter().position(|l| *l == layer);
    let mut violations = Vec::new();
    let mut graph: BTreeMap<Unit, BTreeSet<Unit>> = BTreeMap::new();
    for (relative, source) in files {
        let module = module_of(relative);
        if module.is_empty() {
            continue; // lib.rs: the layers' list and the crate's public paths
        }
        let file = relative.display().to_string();
        let Some(own) = rank(&module[0]) else {
            violations.push(Violation::NotThroughALayer { file, path: module.join("::") });
            continue;
        };
        let unit = unit_of(&module);
        graph.entry(unit.clone()).or_default();
        for path in crate_paths(&without_comments(source)) {
            let shown = format!("crate::{}", path.join("::"));
            match rank(&path[0]) {
                None => violations.push(Violation::NotThroughALayer { file: file.clone(), path: shown }),
                Some(theirs) if theirs > own => violations.push(Violation::Upward { file: file.clone(), path: shown }),
                Some(_) => {
                    let target = unit_of(&path);
                    if target != unit {
                        graph.entry(unit.clone()).or_default().insert(target);
                    }
                }
            }
        }
    }
    violations.extend(cycles(&graph).into_iter().map(Violation::Cycle));
    violations
}

/// One circle through each strongly connected group of more than one module (or a module importing itself).
fn cycles(graph: &BTreeMap<Unit, BTreeSet<Unit>>) -> Vec<Vec<String>> {
    let name = |u: &Unit| if u.1.is_empty() { u.0.clone() } else { format!("{}::{}", u.0, u.1) };
    let mut found = Vec::new();
    let mut reported: BTreeSet<Unit> = BTreeSet::new();
    for start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        // A path from one of `start`'s imports back to `start` is a circle through it.
        let mut stack: Vec<(Unit, Vec<Unit>)> =
            graph[start].iter().map(|next| (next.clone(), vec![start.clone(), next.clone()])).collect();
        let mut seen: BTreeSet<Unit> = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            if at == *start {
                reported.extend(trail.iter().cloned());
                found.push(trail.iter().map(name).collect());
                break;
            }
            if !seen.insert(at.clone()) {
                continue;
            }
            for next in graph.get(&at).into_iter().flatten() {
                let mut longer = trail.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    found
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.strip_prefix(root).unwrap().to_path_buf(), text));
        }
    }
}

fn server_sources() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    files
}

#[test]
fn every_import_of_the_server_points_down_its_layers_and_no_modules_import_each_other_around_a_circle() {
    let files = server_sources();
    assert!(files.len() > 30, "the server's sources were not found: {} files", files.len());
    let violations = check(&files);
    assert!(violations.is_empty(), "payhook-server's layers are broken:\n{violations:#?}");
}

#[test]
fn the_check_sees_an_upward_import_a_reexport_and_a_circle() {
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_owned());
    let files = [
        file("base/settings.rs", "use crate::http::error::ApiError;"),
        file("runtime/worker.rs", "use crate::{base::{clock::Clock, settings}, runtime::dispatcher::Dispatcher};"),
        file("runtime/dispatcher.rs", "fn f() { crate::runtime::worker::run(); }"),
        file("http/api.rs", "use crate::now_ms; // crate::app::router is only named in a comment"),
        file("app.rs", "use crate::http::api;"),
    ];
    let violations = check(&files);
    assert_eq!(
        violations,
        vec![
            Violation::Upward { file: "base/settings.rs".into(), path: "crate::http::error::ApiError".into() },
            Violation::NotThroughALayer { file: "http/api.rs".into(), path: "crate::now_ms".into() },
            Violation::Cycle(vec![
                "runtime::dispatcher".into(),
                "runtime::worker".into(),
                "runtime::dispatcher".into()
            ]),
        ]
    );
}

#[test]
fn only_the_clock_reads_the_system_time() {
    let readers: Vec<String> = server_sources()
        .into_iter()
        .filter(|(path, text)| path != Path::new("base/clock.rs") && without_comments(text).contains("SystemTime::now"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(readers.is_empty(), "these read the system time instead of the state's Clock: {readers:?}");
}
