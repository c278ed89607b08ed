//! The `[[sinks]]` table's delivery keys: per-key order and what a dead row does to its key.

use super::*;
use payhook_store::KeyOrder;

fn sink(lines: &str) -> String {
    format!("[[sinks]]\nname = \"shop\"\nurl = \"https://shop.example/in\"\nkinds = [\"*\"]\n{lines}")
}

#[test]
fn a_sink_delivers_each_key_in_order_holding_a_dead_rows_key_unless_told_otherwise() {
    for (lines, order) in [
        ("", KeyOrder::Hold),
        ("ordering = \"key\"\non_dead = \"hold\"\n", KeyOrder::Hold),
        ("on_dead = \"skip\"\n", KeyOrder::Skip),
        ("ordering = \"none\"\n", KeyOrder::Unordered),
    ] {
        let c = Config::from_toml(&sink(lines), "t", None).unwrap();
        assert_eq!(c.settings.sinks[0].order, order, "{lines}");
    }
    let err =
        format!("{:#}", Config::from_toml(&sink("ordering = \"none\"\non_dead = \"skip\"\n"), "t", None).unwrap_err());
    assert!(err.contains("sinks[0] (shop): on_dead"), "{err}");
    let err = format!("{:#}", Config::from_toml(&sink("ordering = \"fifo\"\n"), "t", None).unwrap_err());
    assert!(err.contains("ordering"), "{err}");
}

#[test]
fn a_rate_per_second_takes_a_burst_that_defaults_to_max_in_flight() {
    let c = Config::from_toml(&sink("rate_per_second = 2.5\nmax_in_flight = 8\n"), "t", None).unwrap();
    assert_eq!(c.settings.sinks[0].rate, Some(payhook_server::SinkRate { per_second: 2.5, burst: 8 }));
    let c = Config::from_toml(&sink("rate_per_second = 10\nburst = 3\n"), "t", None).unwrap();
    assert_eq!(c.settings.sinks[0].rate, Some(payhook_server::SinkRate { per_second: 10.0, burst: 3 }));
    assert_eq!(Config::from_toml(&sink(""), "t", None).unwrap().settings.sinks[0].rate, None);
    for (lines, key) in [
        ("burst = 3\n", "burst"),
        ("rate_per_second = 0\n", "rate_per_second"),
        ("rate_per_second = -1.0\n", "rate_per_second"),
        ("rate_per_second = 1\nburst = 0\n", "burst"),
    ] {
        let err = format!("{:#}", Config::from_toml(&sink(lines), "t", None).unwrap_err());
        assert!(err.contains(&format!("sinks[0] (shop): {key}")), "{lines}: {err}");
    }
}
