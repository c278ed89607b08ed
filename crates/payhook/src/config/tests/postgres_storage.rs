//! The PostgreSQL keys of `[storage]`: the URL and its TLS mode, the pool and its batches, the read URL, a
//! synchronous standby; bad values named without echoing a password.

use super::*;

#[test]
fn a_postgres_url_selects_postgres_with_the_pool_keys() {
    let text = "[storage]\nurl = \"postgres://payhook:s3cret@db.internal:6543/hooks?options=-csearch_path%3Dph\"\n\
                pool_size = 24\nstatement_timeout_ms = 750\nbatch_max = 100\n";
    let c = Config::from_toml(text, "t", None).unwrap();
    let o = postgres(&c);
    let keys = (o.pool_size, o.writers, o.executing_writers, o.statement_timeout_ms, o.batch_max);
    assert_eq!(keys, (24, 4, 1, 750, 100), "one batch executing, the others waiting for their COMMIT");
    assert_eq!(o.config.get_dbname(), Some("hooks"));
    assert_eq!(o.config.get_options(), Some("-csearch_path=ph"));
    let shown = format!("{} {c:?}", c.storage.describe());
    assert!(shown.contains("db.internal:6543/hooks (tls: prefer, ") && !shown.contains("s3cret"), "{shown}");

    let c = Config::from_toml("[storage]\nurl = \"postgresql://u@h/d\"\ngroup_commit = false\n", "t", None).unwrap();
    let o = postgres(&c);
    let keys = (o.batch_max, o.pool_size, o.writers, o.executing_writers);
    assert_eq!(keys, (1, 16, 4, 4), "the defaults file's pool; one event per transaction: every writer executes");
}

#[test]
fn a_synchronous_standby_is_not_required_by_default_and_may_be_for_postgres() {
    let url = "[storage]\nurl = \"postgres://payhook@db.internal/hooks\"\n";
    let c = Config::from_toml(url, "t", None).unwrap();
    assert!(!postgres(&c).require_sync_standby);
    assert!(!c.storage.describe().contains("synchronous standby"), "{}", c.storage.describe());
    let c = Config::from_toml(&format!("{url}require_sync_standby = true\n"), "t", None).unwrap();
    assert!(postgres(&c).require_sync_standby);
    assert!(c.storage.describe().ends_with(", synchronous standby required)"), "{}", c.storage.describe());
    // Like every PostgreSQL key, ignored for SQLite (which has no standby to wait for).
    let c = Config::from_toml("[storage]\nrequire_sync_standby = true\n", "t", None).unwrap();
    sqlite(&c);
}

#[test]
fn a_read_url_sends_listings_and_stats_to_a_pool_of_its_own_shown_without_its_password() {
    let url = "[storage]\nurl = \"postgres://payhook:s3cret@primary.internal/hooks\"\n";
    let c = Config::from_toml(url, "t", None).unwrap();
    assert!(postgres(&c).read.is_none() && postgres(&c).read_target().is_none(), "unset by default");
    assert!(!c.storage.describe().contains("read from"), "{}", c.storage.describe());
    let text = format!(
        "{url}read_url = \"postgres://reader:r34d-PLANTED@standby.internal:6432/hooks?target_session_attrs=read-only\
         &sslmode=require&options=-csearch_path%3Dph\"\n"
    );
    let c = Config::from_toml(&text, "t", None).unwrap();
    let o = postgres(&c);
    assert_eq!(o.read_pool_size, 8, "the defaults file's read_pool_size");
    let read = o.read.as_ref().expect("a read target");
    assert_eq!(read.tls.mode(), payhook_postgres::SslMode::Require);
    assert_eq!(read.config.get_target_session_attrs(), tokio_postgres::config::TargetSessionAttrs::ReadOnly);
    assert_eq!(read.config.get_options(), Some("-csearch_path=ph"));
    assert_eq!(o.read_target().as_deref(), Some("postgres://reader@standby.internal:6432/hooks"));
    let shown = format!("{} {c:?}", c.storage.describe());
    assert!(
        shown.contains(
            "; listings and stats read from postgres://reader@standby.internal:6432/hooks (tls: require, \
                        read_pool_size 8)"
        ),
        "{shown}"
    );
    assert!(!shown.contains("r34d-PLANTED") && !shown.contains("s3cret"), "{shown}");
    let c = Config::from_toml(&format!("{text}read_pool_size = 3\n"), "t", None).unwrap();
    assert_eq!(postgres(&c).read_pool_size, 3);
    // An environment override that empties it is no read URL.
    let env = [("PAYHOOK_STORAGE__READ_URL".to_owned(), String::new())];
    let c = Config::from_toml_and_env(&text, "t", None, env).unwrap();
    assert!(postgres(&c).read.is_none());
}

#[test]
fn a_read_url_without_a_postgres_url_is_refused() {
    let text = "[storage]\nread_url = \"postgres://reader:pw@standby.internal/hooks\"\n";
    let err = format!("{:#}", Config::from_toml(text, "t", None).unwrap_err());
    assert!(err.contains("storage.read_url: only for PostgreSQL; storage.url is sqlite://"), "{err}");
    assert!(!err.contains("pw@"), "{err}");
}

#[test]
fn a_bad_read_url_is_named_without_echoing_its_password() {
    let url = "url = \"postgres://u:pw@h/d\"\n";
    for (text, key) in [
        ("read_url = \"mysql://u:r34d-PLANTED@h/d\"", "storage.read_url: unsupported scheme"),
        ("read_url = \"postgres://u:r34d-PLANTED@h:notaport/d\"", "storage.read_url"),
        ("read_url = \"postgres://u:r34d-PLANTED@h/d?sslmode=verfy-full\"", "storage.read_url: sslmode \"verfy-full\""),
        (
            "read_url = \"postgres://u:r34d-PLANTED@h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem\"",
            "/nonexistent/ca.pem",
        ),
        ("read_url = \"postgres://u:r34d-PLANTED@h/d\"\nread_pool_size = 0", "storage.read_pool_size must be positive"),
    ] {
        let err = format!("{:#}", Config::from_toml(&format!("[storage]\n{url}{text}\n"), "t", None).unwrap_err());
        assert!(err.contains(key) && !err.contains("r34d-PLANTED") && !err.contains("pw@"), "{text}: {err}");
    }
}

#[test]
fn the_postgres_tls_mode_comes_from_the_url_and_is_shown_with_the_storage() {
    let text = "[storage]\nurl = \"postgres://payhook:s3cret@db.example/payhook?sslmode=verify-full\"\n";
    let c = Config::from_toml(text, "t", None).unwrap();
    assert_eq!(postgres(&c).tls.mode(), payhook_postgres::SslMode::VerifyFull);
    let shown = c.storage.describe();
    assert!(shown.starts_with("postgres://payhook@db.example:5432/payhook (tls: verify-full, "), "{shown}");
}

#[test]
fn bad_postgres_settings_are_named_without_echoing_the_url() {
    for (text, key) in [
        ("url = \"mysql://u:pw@h/d\"", "storage.url"),
        ("url = \"postgres://u:pw@h:notaport/d\"", "storage.url"),
        ("url = \"postgres://u:pw@h/d?sslmode=verfy-full\"", "storage.url: sslmode \"verfy-full\" is not one of"),
        ("url = \"postgres://u:pw@h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem\"", "/nonexistent/ca.pem"),
        ("url = \"postgres://u:pw@h/d\"\npool_size = 0", "storage.pool_size"),
        ("url = \"postgres://u:pw@h/d\"\npool_size = 4\nwriters = 5", "storage.writers"),
        ("url = \"postgres://u:pw@h/d\"\nwriters = 2\nexecuting_writers = 3", "storage.executing_writers"),
        ("url = \"postgres://u:pw@h/d\"\nexecuting_writers = 0", "storage.executing_writers"),
    ] {
        let err = format!("{:#}", Config::from_toml(&format!("[storage]\n{text}\n"), "t", None).unwrap_err());
        assert!(err.contains(key) && !err.contains("pw"), "{text}: {err}");
    }
}
