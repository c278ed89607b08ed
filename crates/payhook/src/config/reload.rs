//! Reading the configuration again for a running `payhook serve` (SIGHUP, `payhook reload`): the file is checked
//! exactly as `payhook config check` checks it, then compared with the configuration in force.
//!
//! Only `[[sources]]`, `[[sinks]]`, `[alerts]` and who may call the operator surfaces (the API token, the named
//! tokens, the identity header and identities) are applied by a reload. A file that also changes any other setting
//! (the listener, storage, TLS paths, the metrics listener, the worker, …) is refused as a whole, naming those
//! settings: after a reload that succeeded, the running server is exactly what its file says,
//! and a later restart brings no surprise.

use super::{Config, Merged};
use payhook_server::Reloaded;

/// The top-level tables a reload applies; every other setting takes effect only on restart, except these.
pub const RELOADABLE: [&str; 3] = ["sources", "sinks", "alerts"];

/// The keys of `[server]` a reload applies: who may call the operator surfaces. (A token read from the
/// environment is read from the process's environment, which a reload does not change.)
pub const RELOADABLE_SERVER_KEYS: [&str; 5] =
    ["server.api_token", "server.api_token_env", "server.tokens", "server.identity_header", "server.identities"];

impl Config {
    /// Reads the file this configuration came from again and checks it against this one: the new configuration
    /// and what the server must apply, or the message saying why nothing is applied (`config check`'s own
    /// message for a file that does not pass it).
    pub fn reread(&self) -> Result<(Config, Reloaded), String> {
        let new = Config::load(self.file.as_deref()).map_err(|e| format!("{e:#}"))?;
        let restart_only = differing_settings(&self.merged, &new.merged);
        if !restart_only.is_empty() {
            let file = new.file.as_ref().map_or_else(|| "<defaults>".to_owned(), |p| p.display().to_string());
            return Err(format!(
                "{file}: {} changed, which takes effect only on restart; nothing was applied (restart payhook, or \
                 undo {} to reload the rest)",
                restart_only.join(", "),
                if restart_only.len() == 1 { "that change" } else { "those changes" }
            ));
        }
        let reloaded = Reloaded {
            settings: new.settings.clone(),
            changed_sources: changed_entries(&self.merged, &new.merged, "sources"),
            changed_sinks: changed_entries(&self.merged, &new.merged, "sinks"),
            alerts_changed: self.merged.0.get("alerts") != new.merged.0.get("alerts"),
        };
        Ok((new, reloaded))
    }
}

/// The dotted keys outside [`RELOADABLE`] whose values differ between `old` and `new`.
fn differing_settings(old: &Merged, new: &Merged) -> Vec<String> {
    let mut out = Vec::new();
    let keep = |t: &toml::Table| -> toml::Table {
        t.iter().filter(|(k, _)| !RELOADABLE.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    differing(&keep(&old.0), &keep(&new.0), "", &mut out);
    out.retain(|path| !RELOADABLE_SERVER_KEYS.contains(&path.as_str()));
    out
}

fn differing(old: &toml::Table, new: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match (old.get(key), new.get(key)) {
            (Some(toml::Value::Table(a)), Some(toml::Value::Table(b))) => differing(a, b, &path, out),
            (a, b) if a != b => out.push(path),
            _ => {}
        }
    }
}

/// The names of the entries of the array of tables `table` (`sources`, `sinks`) present in both `old` and `new`
/// whose definitions differ.
fn changed_entries(old: &Merged, new: &Merged, table: &str) -> Vec<String> {
    let entries = |m: &Merged| -> Vec<(String, toml::Value)> {
        let Some(toml::Value::Array(items)) = m.0.get(table) else { return Vec::new() };
        items.iter().filter_map(|item| Some((item.get("name")?.as_str()?.to_owned(), item.clone()))).collect()
    };
    let before = entries(old);
    entries(new)
        .into_iter()
        .filter(|(name, item)| before.iter().any(|(n, i)| n == name && i != item))
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(text: &str) -> Merged {
        Config::from_toml(text, "payhook.toml", None).expect("valid").merged
    }

    const SOURCE: &str = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n";

    #[test]
    fn only_settings_outside_sources_sinks_and_alerts_need_a_restart() {
        let old = merged(SOURCE);
        let secrets = SOURCE.replace("[\"s\"]", "[\"t\", { value = \"s\", not_after = \"2099-01-01T00:00:00Z\" }]");
        assert!(differing_settings(&old, &merged(&secrets)).is_empty());
        assert_eq!(changed_entries(&old, &merged(&secrets), "sources"), ["a"]);
        assert!(changed_entries(&old, &merged(SOURCE), "sources").is_empty());
        let moved = format!("[server]\nlisten = \"127.0.0.1:9999\"\n[storage]\nurl = \"sqlite://other.db\"\n{SOURCE}");
        assert_eq!(differing_settings(&old, &merged(&moved)), ["server.listen", "storage.url"]);
        let tokens = format!(
            "[server]\nidentity_header = \"X-Email\"\ntrusted_proxies = [\"10.0.0.1\"]\n[[server.tokens]]\nname = \"g\"\n\
             scopes = [\"read\"]\ntoken_sha256 = \"{}\"\n[[server.identities]]\ndomain = \"example.com\"\n\
             scopes = [\"read\"]\n{SOURCE}",
            "ab".repeat(32)
        );
        assert_eq!(
            differing_settings(&old, &merged(&tokens)),
            ["server.trusted_proxies"],
            "tokens and identities reload"
        );
    }
}
