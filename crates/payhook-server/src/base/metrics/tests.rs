use super::*;
use std::time::Duration;
use throughput::THROUGHPUT_MINUTES;

#[test]
fn throughput_counts_per_minute_and_forgets_minutes_older_than_an_hour() {
    let t = Throughput::default();
    let start = 1_700_000_000_000 / 60_000 * 60_000;
    t.record(start, Duration::from_millis(2));
    t.record(start + 59_999, Duration::from_millis(4));
    t.record(start + 60_000, Duration::from_millis(1));
    let hour = t.last_hour(start + 60_000);
    assert_eq!(hour.len(), THROUGHPUT_MINUTES);
    assert_eq!(hour[THROUGHPUT_MINUTES - 2], Minute { minute: start / 60_000, count: 2, latency_us: 6_000 });
    assert_eq!(hour[THROUGHPUT_MINUTES - 1].count, 1);
    // An hour later the first minute's slot is reused and its old counts are gone.
    t.record(start + 3_600_000, Duration::from_millis(1));
    let later = t.last_hour(start + 3_600_000);
    assert_eq!(later.iter().map(|m| m.count).sum::<u64>(), 2, "{later:?}");
    assert_eq!(later[THROUGHPUT_MINUTES - 1].count, 1);
}

#[test]
fn partition_counters_are_rendered_as_counters() {
    let p = payhook_store::metrics::PartitionMetrics { detached: 3, dropped: 2, lock_timeouts: 1 };
    let mut out = String::new();
    render_partitions(&mut out, &p);
    for line in [
        "# TYPE payhook_postgres_partitions_total counter",
        "payhook_postgres_partitions_total{action=\"detached\"} 3",
        "payhook_postgres_partitions_total{action=\"dropped\"} 2",
        "# TYPE payhook_postgres_partition_lock_timeouts_total counter",
        "payhook_postgres_partition_lock_timeouts_total 1",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} is missing from:\n{out}");
    }
}

#[test]
fn batch_reruns_and_failures_are_rendered_as_counters_and_batches_in_flight_as_gauges() {
    let mut out = String::new();
    let outcomes = payhook_store::metrics::BatchOutcomes { reruns: 4, failed: 2, in_flight: 3, executing: 1 };
    render_batches(&mut out, &outcomes);
    for line in [
        "# TYPE payhook_postgres_batch_reruns_total counter",
        "payhook_postgres_batch_reruns_total 4",
        "# TYPE payhook_postgres_batches_failed_total counter",
        "payhook_postgres_batches_failed_total 2",
        "# TYPE payhook_postgres_batches_in_flight gauge",
        "payhook_postgres_batches_in_flight 3",
        "# TYPE payhook_postgres_batches_executing gauge",
        "payhook_postgres_batches_executing 1",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} is missing from:\n{out}");
    }
}

#[test]
fn connect_failures_and_held_back_requests_are_rendered_as_counters() {
    let mut out = String::new();
    render_connects(&mut out, &payhook_store::metrics::ConnectMetrics { failures: 7, held_back: 40 });
    for line in ["payhook_postgres_connect_failures_total 7", "payhook_postgres_connects_held_back_total 40"] {
        assert!(out.lines().any(|l| l == line), "{line} is missing from:\n{out}");
    }
}

#[test]
fn sync_standbys_are_a_gauge_rendered_only_when_the_role_may_see_them() {
    let mut r = payhook_store::Replication {
        synchronous_commit: "on".to_owned(),
        synchronous_standby_names: "*".to_owned(),
        sync_standbys: Some(2),
        streaming_standbys: Some(3),
        in_recovery: false,
        required: false,
    };
    let mut out = String::new();
    render_replication(&mut out, &r);
    for line in ["# TYPE payhook_postgres_sync_standbys gauge", "payhook_postgres_sync_standbys 2"] {
        assert!(out.lines().any(|l| l == line), "{line} is missing from:\n{out}");
    }
    r.sync_standbys = None;
    let mut out = String::new();
    render_replication(&mut out, &r);
    assert_eq!(out, "", "nothing is known, nothing is rendered");
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape("plain"), "plain");
    assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
}

#[test]
fn a_histogram_is_rendered_cumulative_in_its_unit() {
    let h = Histogram::new(&[500, 1_000_000]);
    h.observe(400);
    h.observe(2_000_000);
    let mut out = String::new();
    histogram(&mut out, "x_seconds", "s=\"a\"", &h.snapshot(), 1e6);
    assert_eq!(
        out,
        "x_seconds_bucket{s=\"a\",le=\"0.0005\"} 1\nx_seconds_bucket{s=\"a\",le=\"1\"} 1\n\
         x_seconds_bucket{s=\"a\",le=\"+Inf\"} 2\nx_seconds_sum{s=\"a\"} 2.0004\nx_seconds_count{s=\"a\"} 2\n"
    );
}

#[test]
fn the_build_is_rendered_as_an_info_gauge_with_its_version_and_commit() {
    let mut out = String::new();
    let build = crate::base::settings::BuildInfo { version: "1.2.3".into(), commit: "0123456789ab".into() };
    render_build_info(&mut out, &build);
    assert!(out.contains("# TYPE payhook_build_info gauge\n"), "{out}");
    assert!(out.ends_with("payhook_build_info{version=\"1.2.3\",commit=\"0123456789ab\"} 1\n"), "{out}");
}
