//! Unit tests of the configuration: defaults, overrides, every refusal naming its key.

use super::server::DEFAULT_TOKEN_ENV;
use super::*;
use payhook_core::format::Format;
use payhook_core::signature::DEFAULT_REQUIRED_COMPONENTS;
use payhook_server::SinkTransport;

mod access;
mod postgres_storage;
mod sinks;
mod sources;

#[test]
fn the_defaults_alone_resolve() {
    let c = Config::from_toml("", "t", None).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    let StorageConfig::Sqlite(o) = &c.storage else { panic!("sqlite by default: {:?}", c.storage) };
    assert_eq!(o.path, PathBuf::from("payhook.db"));
    assert!(c.settings.sources.is_empty());
}

#[test]
fn the_example_file_resolves() {
    let text = include_str!("../../../../examples/payhook.toml");
    let c = Config::from_toml(text, "example", None).unwrap();
    assert_eq!(c.settings.sources.len(), 3);
}

#[test]
fn a_syntax_error_names_its_line() {
    let err = Config::from_toml("[server]\nlisten = \n", "f.toml", None).unwrap_err().to_string();
    assert!(err.contains("f.toml") && err.contains("line 2"), "{err}");
}

#[test]
fn problems_name_the_file_line_and_key() {
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\n\n[storage]\nurll = \"x\"\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:5: ") && err.contains("urll"), "{err}");

    let text = "[server]\nbody_limit_bytes = 10\nlisten = \"nowhere\"\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:3: server.listen"), "{err}");

    let text = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\n\
                [[sources]]\nname = \"b\"\nscheme = \"nope\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:9: sources[1] (b): scheme"), "{err}");
}

#[test]
fn environment_overrides_apply_over_the_file_and_are_blamed_by_name() {
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\n";
    let c = Config::from_toml_and_env(
        text,
        "f.toml",
        None,
        env(&[
            ("PAYHOOK_SERVER__LISTEN", "0.0.0.0:9090"),
            ("PAYHOOK_WORKER__CLAIM_BATCH", "7"),
            ("PAYHOOK_RETENTION__ENABLED", "false"),
            ("PAYHOOK_API_TOKEN", "not-an-override-but-the-token"),
        ]),
    )
    .unwrap();
    assert_eq!(c.settings.api_token.as_ref().map(Secret::expose), Some("not-an-override-but-the-token"));
    assert_eq!(c.listen.to_string(), "0.0.0.0:9090");
    assert_eq!(c.settings.worker.claim_batch, 7);
    assert!(!c.settings.retention.enabled);

    let err = format!(
        "{:#}",
        Config::from_toml_and_env(text, "f.toml", None, env(&[("PAYHOOK_SERVER__LISTEN", "nowhere")])).unwrap_err()
    );
    assert!(err.starts_with("environment variable PAYHOOK_SERVER__LISTEN: server.listen"), "{err}");
    let err = format!(
        "{:#}",
        Config::from_toml_and_env(text, "f.toml", None, env(&[("PAYHOOK_SOURCES__NAME", "x")])).unwrap_err()
    );
    assert!(err.contains("PAYHOOK_SOURCES__NAME"), "{err}");
}

#[test]
fn retention_must_outlast_provider_redeliveries() {
    let err = format!("{:#}", Config::from_toml("[retention]\nkeys_days = 1\n", "f.toml", None).unwrap_err());
    assert!(err.contains("f.toml:2: retention.keys_days"), "{err}");
    let c = Config::from_toml("", "f.toml", None).unwrap();
    assert_eq!((c.settings.retention.payloads_ms, c.settings.retention.keys_ms), (7 * 86_400_000, 30 * 86_400_000));
}

#[test]
fn settled_orders_are_kept_at_least_as_long_as_the_dedup_keys() {
    let c = Config::from_toml("", "f.toml", None).unwrap();
    assert_eq!(c.settings.retention.orders_ms, 550 * 86_400_000);
    let err = format!("{:#}", Config::from_toml("[retention]\norders_days = 29\n", "f.toml", None).unwrap_err());
    assert!(err.contains("f.toml:2: retention.orders_days: must be at least retention.keys_days (30)"), "{err}");
    let c = Config::from_toml("[retention]\norders_days = 30\n", "f.toml", None).unwrap();
    assert_eq!(c.settings.retention.orders_ms, 30 * 86_400_000);
}

#[test]
fn the_wal_bound_and_pruning_pace_come_from_the_configuration() {
    let c = Config::from_toml("", "f.toml", None).unwrap();
    let o = sqlite(&c);
    assert_eq!((o.wal_limit_bytes, o.wal_checkpoint_wait_ms, o.vacuum_step_pages), (256 << 20, 100, 1024));
    assert_eq!((c.settings.retention.pause_percent, c.settings.retention.cli_min_pause_ms), (100, 150));
    let text = "[storage]\nwal_limit_bytes = 2097152\nwal_checkpoint_wait_ms = 50\n";
    assert_eq!(sqlite(&Config::from_toml(text, "f.toml", None).unwrap()).wal_limit_bytes, 2 << 20);
    for (text, names) in [
        ("[storage]\nwal_limit_bytes = 4096\n", "storage.wal_limit_bytes"),
        ("[storage]\nwal_checkpoint_wait_ms = 5000\n", "storage.wal_checkpoint_wait_ms"),
        ("[storage]\nwal_checkpoint_wait_ms = 0\n", "storage.wal_checkpoint_wait_ms"),
    ] {
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.contains(names), "{text}: {err}");
    }
}

#[test]
fn the_writer_cache_comes_from_the_configuration_within_its_bounds() {
    assert_eq!(sqlite(&Config::from_toml("", "f.toml", None).unwrap()).writer_cache_bytes, 8 << 20);
    let text = "[storage]\nwriter_cache_bytes = 33554432\n";
    assert_eq!(sqlite(&Config::from_toml(text, "f.toml", None).unwrap()).writer_cache_bytes, 32 << 20);
    for text in [
        "[storage]\nwriter_cache_bytes = 0\n",
        "[storage]\nwriter_cache_bytes = 1048575\n",
        // 80 GiB: a digit too many.
        "[storage]\nwriter_cache_bytes = 85899345920\n",
        "[storage]\nwriter_cache_bytes = \"8MiB\"\n",
    ] {
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.contains("storage.writer_cache_bytes"), "{text}: {err}");
    }
}

#[test]
fn an_unknown_key_is_named() {
    let err = format!("{:#}", Config::from_toml("[storage]\nurll = \"x\"\n", "f.toml", None).unwrap_err());
    assert!(err.contains("urll"), "{err}");
}

#[test]
fn a_source_without_secrets_is_refused_with_its_index() {
    let text = "[[sources]]\nname = \"p\"\nscheme = \"stripe\"\nformat = \"stripe\"\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("sources[0] (p)") && err.contains("secret"), "{err}");
}

fn sqlite(c: &Config) -> &SqliteOptions {
    match &c.storage {
        StorageConfig::Sqlite(o) => o,
        other => panic!("expected sqlite: {other:?}"),
    }
}

fn postgres(c: &Config) -> &PgOptions {
    match &c.storage {
        StorageConfig::Postgres(o) => o,
        other => panic!("expected postgres: {other:?}"),
    }
}

#[test]
fn group_commit_off_means_batches_of_one_each_with_its_own_fsync() {
    let c = Config::from_toml("[storage]\ngroup_commit = false\n", "t", None).unwrap();
    assert_eq!(sqlite(&c).batch_max, 1);
    assert_eq!(sqlite(&c).sync, CommitSync::InCommit);
    let c = Config::from_toml("", "t", None).unwrap();
    assert_eq!(sqlite(&c).sync, CommitSync::Pipelined);
}

#[test]
fn sqlite_reads_get_four_connections_and_five_seconds_by_default_and_both_must_be_positive() {
    let c = Config::from_toml("", "t", None).unwrap();
    assert_eq!((sqlite(&c).read_connections, sqlite(&c).read_timeout_ms), (4, 5_000));
    let c = Config::from_toml("[storage]\nread_connections = 8\nread_timeout_ms = 250\n", "t", None).unwrap();
    assert_eq!((sqlite(&c).read_connections, sqlite(&c).read_timeout_ms), (8, 250));
    for text in ["read_connections = 0", "read_timeout_ms = 0"] {
        let err = format!("{:#}", Config::from_toml(&format!("[storage]\n{text}\n"), "t", None).unwrap_err());
        assert!(err.contains("storage.read_connections and storage.read_timeout_ms"), "{text}: {err}");
    }
}

#[test]
fn listings_examine_at_most_list_scan_rows_on_either_backend_and_at_least_a_full_page() {
    let c = Config::from_toml("", "t", None).unwrap();
    assert_eq!(sqlite(&c).list_scan_rows, 10_000);
    let c = Config::from_toml("[storage]\nlist_scan_rows = 2000\n", "t", None).unwrap();
    assert_eq!(sqlite(&c).list_scan_rows, 2_000);
    let text = "[storage]\nurl = \"postgres://payhook@db.internal/hooks\"\nlist_scan_rows = 3000\n";
    assert_eq!(postgres(&Config::from_toml(text, "t", None).unwrap()).list_scan_rows, 3_000);
    let err = format!("{:#}", Config::from_toml("[storage]\nlist_scan_rows = 500\n", "t", None).unwrap_err());
    assert!(err.contains("storage.list_scan_rows: must be at least 501"), "{err}");
}

#[test]
fn the_log_format_is_text_by_default_and_may_be_json() {
    assert_eq!(Config::from_toml("", "t", None).unwrap().log_format, LogFormat::Text);
    let c = Config::from_toml("[log]\nformat = \"json\"\n", "t", None).unwrap();
    assert_eq!(c.log_format, LogFormat::Json);
    let err = format!("{:#}", Config::from_toml("[log]\nformat = \"xml\"\n", "t", None).unwrap_err());
    assert!(err.contains("log.format"), "{err}");
}

#[test]
fn sink_and_alert_urls_are_only_ever_shown_redacted() {
    let text = "[alerts]\nurl = \"https://hooks.slack.com/services/T0/B0/s3cr3t-PLANTED\"\n\n[[sinks]]\n\
                name = \"shop\"\nurl = \"https://u:s3cr3t-PLANTED@shop.example:8443/hooks/in?token=s3cr3t-PLANTED\"\n\
                kinds = [\"*\"]\n";
    let c = Config::from_toml(text, "t", None).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cr3t-PLANTED"), "{shown}");
    assert!(shown.contains("https://shop.example:8443/hooks/…"), "{shown}");
    assert!(shown.contains("https://hooks.slack.com/services/…"), "{shown}");
    for (text, key) in [
        (
            "[[sinks]]\nname = \"shop\"\nurl = \"ftp://s3cr3t-PLANTED@host/x\"\nkinds = [\"*\"]\n",
            "sinks[0] (shop): url",
        ),
        (
            "[[sinks]]\nname = \"shop\"\nurl = \"https://host:99999/s3cr3t-PLANTED\"\nkinds = [\"*\"]\n",
            "sinks[0] (shop): url",
        ),
        ("[alerts]\nurl = \"hooks.slack.com/services/s3cr3t-PLANTED\"\n", "alerts.url"),
    ] {
        let err = format!("{:#}", Config::from_toml(text, "t", None).unwrap_err());
        assert!(err.contains(key) && !err.contains("s3cr3t-PLANTED"), "{text}: {err}");
    }
}

#[test]
fn rfc_9421_sources_require_the_default_components_unless_they_list_others_with_the_body() {
    let source = |extra: &str| {
        format!(
            "[[sources]]\nname = \"acq\"\nscheme = \"http-message-signatures\"\nformat = \"generic\"\n\
             secrets = [\"hmac-sha256:k1:c2VjcmV0\"]\n{extra}"
        )
    };
    let c = Config::from_toml(&source(""), "t", None).unwrap();
    assert_eq!(c.settings.sources[0].verifier.required_components(), DEFAULT_REQUIRED_COMPONENTS);
    let c = Config::from_toml(
        &source("required_components = [\"@method\", \"@path\", \"@query\", \"content-digest\", \"x-shop\"]\n"),
        "t",
        None,
    )
    .unwrap();
    assert_eq!(
        c.settings.sources[0].verifier.required_components(),
        ["@method", "@path", "@query", "content-digest", "x-shop"]
    );
    for (extra, says) in [
        ("required_components = [\"@method\", \"@authority\", \"@path\"]\n", "content-digest"),
        ("required_components = [\"@Method\", \"content-digest\"]\n", "@Method"),
        ("required_components = [\"@status\", \"content-digest\"]\n", "@status"),
        ("required_components = [\"content-digest\", \"content-digest\"]\n", "twice"),
    ] {
        let err = format!("{:#}", Config::from_toml(&source(extra), "f.toml", None).unwrap_err());
        assert!(err.starts_with("f.toml:6: sources[0] (acq): required_components") && err.contains(says), "{err}");
    }
    let text = "[[sources]]\nname = \"p\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\
                required_components = [\"content-digest\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("required_components") && err.contains("http-message-signatures"), "{err}");
}

#[test]
fn an_unknown_fsync_mode_is_named() {
    let err = format!("{:#}", Config::from_toml("[storage]\nfsync = \"never\"\n", "t", None).unwrap_err());
    assert!(err.contains("storage.fsync"), "{err}");
}

const TOKEN_40: &str = "0123456789abcdef0123456789abcdef01234567";

fn with_env(text: &str, env: &[(&str, &str)]) -> Result<Config> {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Config::from_toml_and_env(text, "f.toml", None, env)
}

fn token(c: &Config) -> Option<&str> {
    c.settings.api_token.as_ref().map(Secret::expose)
}

#[test]
fn an_api_token_shorter_than_24_characters_is_refused_naming_the_setting() {
    let err = format!("{:#}", with_env("", &[("PAYHOOK_API_TOKEN", "0123456789")]).unwrap_err());
    assert!(
        err.contains("server.api_token_env (PAYHOOK_API_TOKEN): the API token must be at least 24 characters"),
        "{err}"
    );
    assert!(!err.contains("0123456789"), "the token is echoed: {err}");
    // Whitespace does not count: 23 characters and a newline are still too short.
    let err = format!("{:#}", with_env("", &[("PAYHOOK_API_TOKEN", &format!("{}\n", &TOKEN_40[..23]))]).unwrap_err());
    assert!(err.contains("at least 24 characters"), "{err}");
    let text = "[server]\nlisten = \"127.0.0.1:8080\"\napi_token = \"x\"\n";
    let err = format!("{:#}", with_env(text, &[]).unwrap_err());
    assert!(err.starts_with("f.toml:3: server.api_token: the API token must be at least 24"), "{err}");
    // Exactly 24 is enough.
    let c = with_env("", &[("PAYHOOK_API_TOKEN", &TOKEN_40[..24])]).unwrap();
    assert_eq!(token(&c), Some(&TOKEN_40[..24]));
}

#[test]
fn the_api_token_is_trimmed_of_surrounding_whitespace() {
    let c = with_env("", &[("PAYHOOK_API_TOKEN", &format!("{TOKEN_40}\n"))]).unwrap();
    assert_eq!(token(&c), Some(TOKEN_40));
    assert_eq!(c.api_token_origin, TokenOrigin::Env("PAYHOOK_API_TOKEN".into()));
    let c = with_env(&format!("[server]\napi_token = \"  {TOKEN_40} \"\n"), &[]).unwrap();
    assert_eq!((token(&c), &c.api_token_origin), (Some(TOKEN_40), &TokenOrigin::Inline));
}

#[test]
fn an_api_token_env_naming_an_unset_variable_is_an_error_unless_it_is_the_default() {
    let text = "[server]\napi_token_env = \"SOME_UNSET_VAR\"\n";
    let err = format!("{:#}", with_env(text, &[]).unwrap_err());
    assert!(
        err.starts_with("f.toml:2: server.api_token_env (SOME_UNSET_VAR): the environment variable SOME_UNSET_VAR"),
        "{err}"
    );
    let c = with_env(text, &[("SOME_UNSET_VAR", TOKEN_40)]).unwrap();
    assert_eq!((token(&c), &c.api_token_origin), (Some(TOKEN_40), &TokenOrigin::Env("SOME_UNSET_VAR".into())));
    // An inline token wins, and then the variable is not needed.
    let inline = format!("{text}api_token = \"{TOKEN_40}\"\n");
    assert_eq!(with_env(&inline, &[]).unwrap().api_token_origin, TokenOrigin::Inline);
    // The default variable unset: no token, the API closed.
    let c = with_env("", &[]).unwrap();
    assert_eq!((token(&c), &c.api_token_origin), (None, &TokenOrigin::Unset(Some(DEFAULT_TOKEN_ENV.into()))));
    let c = with_env("[server]\napi_token_env = \"\"\n", &[]).unwrap();
    assert_eq!((token(&c), &c.api_token_origin), (None, &TokenOrigin::Unset(None)));
}

#[test]
fn trusted_proxies_and_the_throttle_are_resolved_and_checked() {
    let c = with_env("", &[]).unwrap();
    let auth = &c.settings.auth;
    assert!(auth.trusted_proxies.is_empty());
    assert_eq!((auth.failures_per_minute, auth.failure_burst, auth.max_addresses), (10, 10, 10_000));

    let text = "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1\", \"fd00::/8\"]\n\
                auth_failures_per_minute = 5\nauth_failure_burst = 20\nauth_throttle_max_addresses = 100\n";
    let auth = with_env(text, &[]).unwrap().settings.auth;
    let proxies: Vec<String> = auth.trusted_proxies.iter().map(ToString::to_string).collect();
    assert_eq!(proxies, ["10.0.0.0/8", "127.0.0.1/32", "fd00::/8"]);
    assert_eq!((auth.failures_per_minute, auth.failure_burst, auth.max_addresses), (5, 20, 100));

    let err = format!("{:#}", with_env("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy\"]\n", &[]).unwrap_err());
    assert!(err.starts_with("f.toml:2: server.trusted_proxies[1]: \"proxy\" is not an IP address"), "{err}");
    let err = format!("{:#}", with_env("[server]\ntrusted_proxies = [\"10.1.0.0/8\"]\n", &[]).unwrap_err());
    assert!(err.contains("server.trusted_proxies[0]") && err.contains("10.0.0.0/8"), "{err}");
    for key in ["auth_failures_per_minute", "auth_failure_burst", "auth_throttle_max_addresses"] {
        let err = format!("{:#}", with_env(&format!("[server]\n{key} = 0\n"), &[]).unwrap_err());
        assert!(err.contains(&format!("server.{key}: must be positive")), "{err}");
    }
}

#[test]
fn the_request_bounds_resolve_with_their_defaults_and_are_checked_against_one_another() {
    let listener = with_env("", &[]).unwrap().settings.listener;
    assert_eq!((listener.body_timeout_ms, listener.request_timeout_ms), (10_000, 60_000));
    assert_eq!((listener.max_connections, listener.max_connections_per_client), (2_048, 1_024));
    assert_eq!(listener.body_buffer_bytes, 64 * 1024 * 1024);
    // The per-client share follows the cap unless set.
    let listener = with_env("[server]\nmax_connections = 300\n", &[]).unwrap().settings.listener;
    assert_eq!(listener.max_connections_per_client, 150);
    let text = "[server]\nmax_connections = 300\nmax_connections_per_client = 300\nrequest_timeout_ms = 20000\n\
                body_buffer_bytes = 2097152\n";
    let listener = with_env(text, &[]).unwrap().settings.listener;
    assert_eq!((listener.max_connections_per_client, listener.request_timeout_ms), (300, 20_000));
    assert_eq!(listener.body_buffer_bytes, 2 * 1024 * 1024);

    let refused = |text: &str| format!("{:#}", with_env(text, &[]).unwrap_err());
    for key in ["body_timeout_ms", "request_timeout_ms", "max_connections_per_client", "body_buffer_bytes"] {
        let err = refused(&format!("[server]\n{key} = 0\n"));
        assert!(err.starts_with(&format!("f.toml:2: server.{key}: must be positive")), "{err}");
    }
    let err = refused("[server]\nmax_connections = 10\nmax_connections_per_client = 11\n");
    assert!(err.starts_with("f.toml:3: server.max_connections_per_client (11) must not exceed"), "{err}");
    let err = refused("[server]\nbody_buffer_bytes = 1048575\n");
    assert!(err.starts_with("f.toml:2: server.body_buffer_bytes (1048575) must be at least server.body_limit_bytes"));
    let err = refused("[server]\nbody_timeout_ms = 30000\nrequest_timeout_ms = 20000\n");
    assert!(err.contains("server.request_timeout_ms (20000) must be at least server.body_timeout_ms"), "{err}");
    // A bulk replay of replay.max_per_call at replay.per_second must fit in the request's deadline.
    let err = refused("[server]\nrequest_timeout_ms = 15000\n[replay]\nmax_per_call = 2000\n");
    assert!(
        err.contains("server.request_timeout_ms (15000) must be longer than a bulk replay") && err.contains("20000 ms")
    );
    assert!(with_env("[server]\nrequest_timeout_ms = 15000\n", &[]).is_ok(), "10 s of replay fit in 15 s");
}

#[test]
fn broker_sinks_resolve_with_their_templates_and_show_their_urls_redacted() {
    let text = "[[sinks]]\ntype = \"nats\"\nname = \"bus\"\nurl = \"nats://payhook:n4ts-PLANTED@nats.internal:4222\"\n\
                subject = \"payhook.{kind}.{order_id}\"\nkinds = [\"order.paid\"]\n\n\
                [[sinks]]\ntype = \"redis\"\nname = \"stream\"\nurl = \"redis://:r3dis-PLANTED@redis.internal:6379/0\"\n\
                stream = \"payhook:{kind}\"\nkinds = [\"*\"]\n\n\
                [[sinks]]\nname = \"shop\"\nurl = \"https://shop.example/in\"\nkinds = [\"*\"]\n";
    let c = Config::from_toml(text, "t", None).unwrap();
    let transports: Vec<&SinkTransport> = c.settings.sinks.iter().map(|s| &s.transport).collect();
    assert_eq!(
        transports,
        [
            &SinkTransport::Nats { subject: "payhook.{kind}.{order_id}".into() },
            &SinkTransport::Redis { stream: "payhook:{kind}".into(), dedup_window_secs: 86_400 },
            &SinkTransport::Http,
        ]
    );
    let shown = format!("{c:?}");
    assert!(!shown.contains("PLANTED"), "{shown}");
    assert!(shown.contains("nats://nats.internal:4222") && shown.contains("redis://redis.internal:6379/…"), "{shown}");
}

#[test]
fn a_broker_sink_needs_its_destination_and_takes_only_its_own_keys() {
    let sink = |lines: &str| format!("[[sinks]]\nname = \"bus\"\nkinds = [\"*\"]\n{lines}");
    for (text, key) in [
        (sink("type = \"nats\"\nurl = \"nats://h:4222\"\n"), "sinks[0] (bus): subject"),
        (sink("type = \"redis\"\nurl = \"redis://h:6379\"\n"), "sinks[0] (bus): stream"),
        (sink("type = \"nats\"\nurl = \"redis://p4ss-PLANTED@h:6379\"\nsubject = \"s\"\n"), "sinks[0] (bus): url"),
        (sink("type = \"redis\"\nurl = \"https://h/x\"\nstream = \"s\"\n"), "sinks[0] (bus): url"),
        (sink("url = \"https://h/x\"\nsubject = \"s\"\n"), "sinks[0] (bus): subject"),
        (sink("type = \"nats\"\nurl = \"nats://h:4222\"\nsubject = \"s\"\nstream = \"s\"\n"), "sinks[0] (bus): stream"),
        (sink("type = \"nats\"\nurl = \"nats://h:4222\"\nsubject = \"a b\"\n"), "sinks[0] (bus): subject"),
        (sink("type = \"redis\"\nurl = \"redis://h:6379\"\nstream = \"#x:{kind}\"\n"), "sinks[0] (bus): stream"),
        (
            sink("type = \"redis\"\nurl = \"redis://h:6379\"\nstream = \"s\"\ndedup_window_secs = 0\n"),
            "sinks[0] (bus): dedup_window_secs",
        ),
        (sink("type = \"nats\"\nurl = \"nats://h:4222\"\nsubject = \"s\"\nsecret = \"x\"\n"), "sinks[0] (bus): secret"),
        (sink("type = \"amqp\"\nurl = \"amqp://h:5672\"\n"), "sinks[0] (bus): routing_key"),
        (sink("type = \"amqp\"\nurl = \"amqps://h:5671\"\nrouting_key = \"k\"\n"), "sinks[0] (bus): url"),
        (
            sink("type = \"redis\"\nurl = \"redis://h:6379\"\nstream = \"s\"\nexchange = \"x\"\n"),
            "sinks[0] (bus): exchange",
        ),
        (sink("type = \"kafka\"\nurl = \"kafka://h:9092\"\n"), "type"),
    ] {
        let err = format!("{:#}", Config::from_toml(&text, "t", None).unwrap_err());
        assert!(err.contains(key) && !err.contains("PLANTED"), "{text}: {err}");
    }
}

#[test]
fn a_broker_url_asking_for_tls_the_client_cannot_speak_is_refused_and_nats_tls_is_accepted() {
    let sink = |lines: &str| format!("[[sinks]]\nname = \"bus\"\nkinds = [\"*\"]\n{lines}");
    for (text, broker) in [
        (sink("type = \"redis\"\nurl = \"rediss://:p4ss-PLANTED@h:6380/0\"\nstream = \"s\"\n"), "Redis (rediss://)"),
        (sink("type = \"redis\"\nurl = \"REDISS://h:6380\"\nstream = \"s\"\n"), "Redis (rediss://)"),
        (
            sink("type = \"amqp\"\nurl = \"amqps://u:p4ss-PLANTED@h:5671\"\nrouting_key = \"k\"\n"),
            "RabbitMQ (amqps://)",
        ),
    ] {
        let err = format!("{:#}", Config::from_toml(&text, "t", None).unwrap_err());
        assert!(err.contains(&format!("sinks[0] (bus): url: TLS to {broker} is not supported")), "{err}");
        assert!(err.contains("stunnel") && !err.contains("PLANTED"), "{err}");
    }
    let nats = sink("type = \"nats\"\nurl = \"tls://nats.internal:4222\"\nsubject = \"payhook.{kind}\"\n");
    let config = Config::from_toml(&nats, "t", None).expect("NATS over TLS is served");
    assert_eq!(config.settings.sinks[0].url.redacted(), "tls://nats.internal:4222");
}

#[test]
fn the_reconnect_backoff_is_one_second_by_default_and_a_bound_out_of_range_is_refused() {
    let url = "[storage]\nurl = \"postgres://u@h/d\"\n";
    let config = Config::from_toml(url, "t", None).expect("the defaults are valid");
    let StorageConfig::Postgres(o) = &config.storage else { panic!("a PostgreSQL url") };
    assert_eq!(o.reconnect_backoff_max_ms, 1_000);
    for bad in ["0", "60001"] {
        let text = format!("{url}reconnect_backoff_max_ms = {bad}\n");
        let err = format!("{:#}", Config::from_toml(&text, "t", None).unwrap_err());
        assert!(err.contains("storage.reconnect_backoff_max_ms must be between 1 and 60000"), "{err}");
    }
}

/// Every kind of problem names where the value came from: an unknown key and a wrong type in the file (their
/// line, found from the path serde refused), a bad value of a known key, and an environment variable's value.
#[test]
fn unknown_keys_wrong_types_and_bad_overrides_name_their_origin() {
    let problem = |text: &str, env: &[(&str, &str)]| {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        format!("{:#}", Config::from_toml_and_env(text, "f.toml", None, env).unwrap_err())
    };
    let source = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n";
    let err = problem(&format!("{source}\n[[sources]]\nname = \"b\"\nschemex = \"stripe\"\n"), &[]);
    assert!(err.starts_with("f.toml:9: sources[1].schemex: unknown field `schemex`"), "{err}");
    let err = problem("[server]\n\nbody_limit_bytes = \"ten\"\n", &[]);
    assert!(err.starts_with("f.toml:3: server.body_limit_bytes: invalid type: string \"ten\""), "{err}");
    let err = problem("[log]\nformat = \"xml\"\n", &[]);
    assert!(err.starts_with("f.toml:2: log.format: \"xml\" is not one of"), "{err}");
    let err = problem("", &[("PAYHOOK_SERVER__BODY_LIMIT_BYTES", "ten")]);
    assert!(err.starts_with("environment variable PAYHOOK_SERVER__BODY_LIMIT_BYTES: server.body_limit_bytes"), "{err}");
    let err = problem("", &[("PAYHOOK_STORAGE__URLL", "x")]);
    assert!(err.starts_with("environment variable PAYHOOK_STORAGE__URLL: storage.urll: unknown field"), "{err}");
    let err = problem("", &[("PAYHOOK_LOG__FORMAT", "xml")]);
    assert!(err.starts_with("environment variable PAYHOOK_LOG__FORMAT: log.format"), "{err}");
}

#[test]
fn a_sink_listening_for_a_kind_that_does_not_exist_is_refused_with_its_line() {
    let text = "[[sinks]]\nname = \"crm\"\nurl = \"https://crm.example/hook\"\nkinds = [\"order.payed\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:4: sinks[0] (crm): kinds: \"order.payed\" is not an outbox kind"), "{err}");
    assert!(err.contains("order.paid"), "the message lists the kinds: {err}");
}

#[test]
fn a_source_s_orders_are_registered_unless_it_says_implicit_and_a_typo_is_named_with_its_line() {
    let source = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n";
    let c = Config::from_toml(source, "f.toml", None).unwrap();
    assert_eq!(c.settings.sources[0].orders, payhook_server::settings::Orders::Registered);
    let c = Config::from_toml(&format!("{source}orders = \"implicit\"\n"), "f.toml", None).unwrap();
    assert_eq!(c.settings.sources[0].orders, payhook_server::settings::Orders::Implicit);
    assert!(c.settings.routing().implicit_orders.contains("a"));
    let err =
        format!("{:#}", Config::from_toml(&format!("{source}orders = \"implict\"\n"), "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:6: sources[0].orders: unknown variant `implict`"), "{err}");
}

#[test]
fn presets_resolve_by_name_for_the_scheme_and_the_format() {
    let text = "[[sources]]\nname = \"paddle\"\nscheme = \"paddle\"\nformat = \"paddle\"\nsecrets = [\"pdl_ntfset_x\"]\n\n\
                [[sources]]\nname = \"gh\"\nscheme = \"github\"\nformat = \"github\"\nsecrets = [\"s\"]\n";
    let c = Config::from_toml(text, "f.toml", None).unwrap();
    let [paddle, gh] = &c.settings.sources[..] else { panic!("two sources") };
    assert!(matches!(paddle.verifier.scheme(), Scheme::Declared(d) if d.name() == "paddle"));
    assert_eq!((paddle.format.name(), gh.format.name()), ("paddle", "github"));
    // The built-in name selects the code, the preset's format the declared one.
    assert_eq!(*gh.verifier.scheme(), Scheme::Github);
    assert!(matches!(gh.format, Format::Declared(_)));
}

#[test]
fn braintree_is_a_built_in_scheme_and_format_keyed_by_its_api_key_pair() {
    let text = "[[sources]]\nname = \"bt\"\nscheme = \"braintree\"\nformat = \"braintree\"\n\
                secrets = [\"public_key:private_key\"]\n";
    let c = Config::from_toml(text, "f.toml", None).unwrap();
    let [bt] = &c.settings.sources[..] else { panic!("one source") };
    assert_eq!((bt.verifier.scheme(), &bt.format), (&Scheme::Braintree, &Format::Braintree));
    let err = format!("{:#}", Config::from_toml(&text.replace("public_key:", ""), "f.toml", None).unwrap_err());
    assert!(err.contains("sources[0] (bt): secrets") && err.contains("PUBLIC_KEY:PRIVATE_KEY"), "{err}");
}

#[test]
fn an_unknown_scheme_or_format_lists_the_built_in_ones_and_the_presets() {
    let text = "[[sources]]\nname = \"a\"\nscheme = \"padle\"\nformat = \"generic\"\nsecrets = [\"s\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.starts_with("f.toml:3: sources[0] (a): scheme: unknown scheme \"padle\""), "{err}");
    assert!(err.contains("stripe") && err.contains("paddle") && err.contains("square"), "{err}");
    let text = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"strype\"\nsecrets = [\"s\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("format: unknown format \"strype\"") && err.contains("lemon-squeezy"), "{err}");
}

#[test]
fn a_declared_source_resolves_and_its_mistakes_name_their_line_and_key() {
    let text = include_str!("../../../../examples/declared-provider.toml");
    // secrets_env is read from the process's environment: the secret inline instead.
    let inline = text.replace("secrets_env = \"ACME_WEBHOOK_SECRET\"", &format!("secrets = [\"{}\"]", "ab".repeat(32)));
    let c = Config::from_toml(&inline, "acme.toml", None).unwrap();
    let source = &c.settings.sources[0];
    assert!(matches!(source.verifier.scheme(), Scheme::Declared(d) if d.name() == "declared"));
    assert!(matches!(&source.format, Format::Declared(f) if f.name() == "declared"));

    // A rule that does not cover the body, blamed on the source's signature table.
    let bad = inline.replace("signed = \"{timestamp}.{url}.{body}\"", "signed = \"{timestamp}.{url}\"");
    let err = format!("{:#}", Config::from_toml(&bad, "acme.toml", None).unwrap_err());
    assert!(err.contains("sources[0] (acme): signature.signed: must cover the body"), "{err}");
    let line = bad.lines().position(|l| l.starts_with("signed = ")).unwrap() + 1;
    assert!(err.starts_with(&format!("acme.toml:{line}: ")), "{err}");
    // An unknown key of the signature table.
    let bad = inline.replace("encoding = \"base64\"", "encodng = \"base64\"");
    let err = format!("{:#}", Config::from_toml(&bad, "acme.toml", None).unwrap_err());
    assert!(err.contains("encodng"), "{err}");
    // A rule missing what its effect needs.
    let bad = inline.replace("order_id = \"/payment/ref\"\n", "");
    let err = format!("{:#}", Config::from_toml(&bad, "acme.toml", None).unwrap_err());
    assert!(err.contains("format.events[0].order_id: a pay rule needs it"), "{err}");
    // A signature table with a scheme name beside it.
    let bad = inline.replace("[sources.signature]", "scheme = \"stripe\"\n\n[sources.signature]");
    let err = format!("{:#}", Config::from_toml(&bad, "acme.toml", None).unwrap_err());
    assert!(err.contains("signature: a source with its own signature table has no scheme"), "{err}");
}

#[test]
fn notification_url_is_only_for_declared_rules() {
    let text = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\
                notification_url = \"https://x.example/webhooks/a\"\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("notification_url: only a declared rule or a preset takes this key"), "{err}");
}

/// A Stripe source whose `secrets` are `secrets` (TOML).
fn stripe_with(secrets: &str) -> Result<Config> {
    let text = format!("[[sources]]\nname = \"s\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = {secrets}\n");
    Config::from_toml(&text, "f.toml", None)
}

#[test]
fn a_secret_being_rotated_out_carries_its_not_after() {
    let c = stripe_with(r#"["whsec_new", { value = "whsec_old", not_after = "2099-12-31T00:00:00Z" }]"#).unwrap();
    let v = &c.settings.sources[0].verifier;
    let old = payhook_core::signature::Verifier::new(Scheme::Stripe, &[Secret::new("whsec_old")], 300).unwrap();
    let at = |t: i64| old.sign(b"{}", t, "m");
    let end = 4_102_358_400; // 2099-12-31T00:00:00Z
    assert_eq!(v.verify(&at(end), b"{}", end).map(|v| v.secret_index()), Ok(1));
    assert!(v.verify(&at(end + 1), b"{}", end + 1).is_err(), "refused the second after");
    // A TOML date-time without quotes and another zone mean the same instant.
    for written in ["2099-12-31T00:00:00Z", "\"2099-12-31T01:00:00+01:00\""] {
        let c = stripe_with(&format!(r#"["n", {{ value = "o", not_after = {written} }}]"#)).unwrap();
        let v = &c.settings.sources[0].verifier;
        assert_eq!(v.verify(&at(end), b"{}", end).err(), Some(payhook_core::signature::VerifyError::Mismatch));
    }
}

#[test]
fn a_not_after_that_is_not_rfc_3339_with_a_zone_is_refused_naming_the_secret() {
    for (secrets, expected) in [
        (
            r#"["n", { value = "o", not_after = "2099-12-31T00:00:00" }]"#,
            "secrets[1]: not_after: \"2099-12-31T00:00:00\" is not an RFC 3339",
        ),
        (r#"["n", { value = "o", not_after = "next year" }]"#, "secrets[1]: not_after"),
        (r#"["n", { value = "o" }]"#, "secrets[1]: not_after: missing"),
        (r#"["n", { value = "o", not_after = "2099-12-31T00:00:00Z", note = "x" }]"#, "secrets[1]: note: unknown key"),
        (r#"[{ not_after = "2099-12-31T00:00:00Z" }]"#, "secrets[0]: value: missing"),
        (r#"[42]"#, "secrets[0]: expected a string"),
    ] {
        let err = format!("{:#}", stripe_with(secrets).unwrap_err());
        assert!(err.contains("sources[0] (s)") && err.contains(expected), "{secrets}: {err}");
        assert!(err.starts_with("f.toml:5: "), "the line of `secrets`: {err}");
    }
}

#[test]
fn a_source_whose_every_secret_is_past_its_not_after_is_refused() {
    let err = format!("{:#}", stripe_with(r#"[{ value = "o", not_after = "2001-01-01T00:00:00Z" }]"#).unwrap_err());
    assert!(err.contains("every secret is past its not_after"), "{err}");
    // One past secret beside a current one is fine: it was rotated out.
    stripe_with(r#"["n", { value = "o", not_after = "2001-01-01T00:00:00Z" }]"#).unwrap();
}
