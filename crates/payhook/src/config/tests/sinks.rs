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
