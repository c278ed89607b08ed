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

#[test]
fn a_filter_takes_a_value_or_a_list_per_pointer_and_routes_by_it() {
    let c = Config::from_toml(
        &sink("when = { \"/source\" = \"stripe\", \"/status\" = [\"paid\", \"refunded\"] }\n"),
        "t",
        None,
    )
    .unwrap();
    let conditions: Vec<(&str, Vec<&str>)> = c.settings.sinks[0]
        .filter
        .conditions
        .iter()
        .map(|c| (c.pointer.as_str(), c.accepted.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(conditions, [("/source", vec!["stripe"]), ("/status", vec!["paid", "refunded"])]);
    let routing = c.settings.routing();
    let paid = r#"{"kind":"order.paid","source":"stripe","status":"paid"}"#;
    let other = r#"{"kind":"order.paid","source":"paddle","status":"paid"}"#;
    assert_eq!(routing.sinks_for("order.paid", paid), ["shop"]);
    assert!(routing.sinks_for("order.paid", other).is_empty());
    assert!(Config::from_toml(&sink(""), "t", None).unwrap().settings.routing().filters.is_empty());
}

#[test]
fn config_check_refuses_a_filter_on_a_field_no_document_has_or_the_store_decides_with_its_line() {
    let receipts = "[[sinks]]\nname = \"shop\"\nurl = \"https://shop.example/in\"\nkinds = [\"order.paid\"]\n";
    for (when, says) in [
        ("when = { \"/currency\" = \"EUR\" }\n", "no document this sink takes has a field \"currency\""),
        ("when = { \"/previous_status\" = \"pending\" }\n", "read from stored state"),
        ("when = { \"source\" = \"stripe\" }\n", "is not a JSON pointer"),
        ("when = { \"/source\" = [] }\n", "accepts nothing"),
    ] {
        let text = format!("{receipts}{when}");
        let err = format!("{:#}", Config::from_toml(&text, "f.toml", None).unwrap_err());
        assert!(err.starts_with("f.toml:5: sinks[0] (shop): when:"), "{when}: {err}");
        assert!(err.contains(says), "{when}: {err}");
    }
    // A forwarded event's fields are known to a sink a source forwards to.
    let forwarded = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\
                     forward = [\"shop\"]\n\n";
    let text = format!("{forwarded}{receipts}when = {{ \"/outcome\" = \"processed\" }}\n");
    assert!(Config::from_toml(&text, "f.toml", None).is_ok());
    let err = format!(
        "{:#}",
        Config::from_toml(&format!("{receipts}when = {{ \"/outcome\" = \"x\" }}\n"), "f", None).unwrap_err()
    );
    assert!(err.contains("no document this sink takes"), "{err}");
}
