//! The configuration reference, `docs/configuration.md`, against the code: every key `payhook config print-default`
//! sets is in the doc with the same default, every key the doc names is one the configuration knows, and every key
//! the configuration knows is in the doc.
//!
//! The doc's format: a heading per table (``## `[server]` ``, ``## `[[sinks]]` ``), then rows
//! ``| `key` | default | meaning |`` where the default is a TOML value in backticks, or `—` for none.

use crate::helpers::{TestDir, text};

const DOC: &str = include_str!("../../../../docs/configuration.md");

/// One row of the doc.
#[derive(Debug)]
struct Row {
    /// The table's path: `server`, `dispatcher.retry`, `sinks`.
    table: String,
    /// An array of tables (`[[sinks]]`).
    array: bool,
    key: String,
    /// `None` for `—`.
    default: Option<toml::Value>,
}

fn toml_value(literal: &str) -> toml::Value {
    let mut table: toml::Table =
        toml::from_str(&format!("v = {literal}")).unwrap_or_else(|e| panic!("{literal} is not a TOML value: {e}"));
    table.remove("v").expect("the value")
}

fn doc_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let mut table: Option<(String, bool)> = None;
    for line in DOC.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            table = heading.strip_prefix("`[").and_then(|h| h.strip_suffix("]`")).map(|name| {
                let array = name.starts_with('[');
                (name.trim_start_matches('[').trim_end_matches(']').to_owned(), array)
            });
            continue;
        }
        let Some((name, array)) = &table else { continue };
        let Some(row) = line.strip_prefix("| `") else { continue };
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(cells.len() >= 3, "a row of [{name}] without its three cells: {line}");
        let key = cells[0].strip_suffix('`').unwrap_or_else(|| panic!("a key in backticks: {line}"));
        let default = match cells[1] {
            "—" => None,
            cell => Some(toml_value(
                cell.strip_prefix('`')
                    .and_then(|c| c.strip_suffix('`'))
                    .unwrap_or_else(|| panic!("`value` or —: {line}")),
            )),
        };
        rows.push(Row { table: name.clone(), array: *array, key: key.to_owned(), default });
    }
    rows
}

/// Every value of `table` that is not itself a table, with its table's path.
fn flatten(path: &str, table: &toml::Table, out: &mut Vec<(String, String, toml::Value)>) {
    for (key, value) in table {
        match value {
            toml::Value::Table(inner) => {
                let inner_path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                flatten(&inner_path, inner, out);
            }
            other => out.push((path.to_owned(), key.clone(), other.clone())),
        }
    }
}

#[test]
fn every_key_print_default_sets_is_in_docs_configuration_with_its_default() {
    let out = TestDir::new().run(&["config", "print-default"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: toml::Table = toml::from_str(&text(&out.stdout)).expect("print-default is TOML");
    let mut keys = Vec::new();
    flatten("", &printed, &mut keys);
    assert!(keys.len() > 50, "print-default sets {} keys", keys.len());
    let rows = doc_rows();
    let mut wrong = Vec::new();
    for (table, key, value) in &keys {
        match rows.iter().find(|r| !r.array && &r.table == table && &r.key == key) {
            None => wrong.push(format!("[{table}] {key} is not in docs/configuration.md")),
            Some(row) if row.default.as_ref() != Some(value) => wrong.push(format!(
                "[{table}] {key}: docs/configuration.md says {:?}, print-default {value}",
                row.default.as_ref().map(toml::Value::to_string)
            )),
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "docs/configuration.md and the defaults differ:\n{}", wrong.join("\n"));
}

fn load(text: &str) -> anyhow::Result<payhook::config::Config> {
    payhook::config::Config::from_toml_and_env(text, "doc", None, std::iter::empty())
}

/// The file header of a table: `[server]`, `[[sinks]]`.
fn header(table: &str, array: bool) -> String {
    if array { format!("[[{table}]]") } else { format!("[{table}]") }
}

#[test]
fn docs_configuration_names_only_keys_the_configuration_knows() {
    // Each key alone in its table, with its documented default (or any value): the configuration may refuse the
    // file for what is missing or for the value, never for the key. Every table denies unknown fields, as this
    // made-up key shows.
    let unknown = load("[server]\nno_such_key = 1").expect_err("an unknown key is refused");
    assert!(format!("{unknown:#}").contains("unknown field"), "{unknown:#}");

    let rows = doc_rows();
    assert!(rows.iter().any(|r| r.array) && rows.len() > 80, "docs/configuration.md has {} rows", rows.len());
    let mut unknown = Vec::new();
    for row in &rows {
        let value = row.default.clone().unwrap_or_else(|| toml::Value::String("value".into()));
        let header = header(&row.table, row.array);
        let file = format!("{header}\n{} = {value}\n", row.key);
        if let Err(e) = load(&file) {
            let message = format!("{e:#}");
            if message.contains("unknown field") {
                unknown.push(format!("{header} {}: {message}", row.key));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "docs/configuration.md names keys the configuration does not know:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn docs_configuration_names_every_key_the_configuration_knows() {
    // A made-up key in each documented table (and at the top): the refusal lists every key the table knows.
    let rows = doc_rows();
    let mut tables: Vec<(String, bool)> = rows.iter().map(|r| (r.table.clone(), r.array)).collect();
    tables.dedup();
    let documented = |table: &str, key: &str| {
        let path = if table.is_empty() { key.to_owned() } else { format!("{table}.{key}") };
        rows.iter().any(|r| r.table == table && r.key == key) || tables.iter().any(|(t, _)| *t == path)
    };
    let mut missing = Vec::new();
    let mut probes = vec![(String::new(), "payhook_doc_probe = 1\n".to_owned())];
    probes
        .extend(tables.iter().map(|(t, array)| (t.clone(), format!("{}\npayhook_doc_probe = 1\n", header(t, *array)))));
    for (table, file) in probes {
        let message = format!("{:#}", load(&file).expect_err("a made-up key is refused"));
        let expected = message.split_once("expected").map(|(_, list)| list).unwrap_or_else(|| panic!("{message}"));
        let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        assert!(!known.is_empty(), "no keys listed for [{table}]: {message}");
        for key in known {
            if !documented(&table, key) {
                missing.push(format!("[{table}] {key}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the configuration knows that docs/configuration.md lacks:\n{}",
        missing.join("\n")
    );
}
