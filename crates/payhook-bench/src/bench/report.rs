//! The benchmark's report: latency percentiles, the per-second table of a sustained run, and the text form.

use serde_json::{Value, json};

pub(super) fn print_text(r: &Value) {
    let l = &r["latency_ms"];
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!("{}", r["command"].as_str().unwrap_or_default());
    println!(
        "{}/{} deliveries acked in {:.2} s: {:.0} acked/s, latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms (concurrency {}, client {}, seed {})",
        r["acked"],
        r["deliveries"],
        f(&r["elapsed_s"]),
        f(&r["acked_per_s"]),
        f(&l["p50"]),
        f(&l["p90"]),
        f(&l["p99"]),
        f(&l["max"]),
        r["concurrency"],
        r["client"].as_str().unwrap_or_default(),
        r["seed"]
    );
    if let Some(o) = r.get("open_loop") {
        println!(
            "open loop at {}/s: {:.0}/s offered, {} late starts (every connection busy), at most {} in flight; \
             latency counts from each delivery's scheduled time",
            f(&o["rate"]),
            f(&o["offered_per_s"]),
            o["late_starts"],
            o["max_in_flight"]
        );
    }
    if let Some(rows) = r["per_second"].as_array() {
        println!("second  acked/s  p50 ms  p99 ms  max ms");
        for row in rows {
            println!(
                "{:>6}  {:>7}  {:>6.2}  {:>6.2}  {:>6.2}",
                row["second"].as_u64().unwrap_or(0),
                row["acked"].as_u64().unwrap_or(0),
                f(&row["p50"]),
                f(&row["p99"]),
                f(&row["max"])
            );
        }
    }
    if let Some(cpu) = r.get("server_cpu") {
        let mut threads: Vec<(&String, f64)> = cpu["by_thread_us_per_acked"]
            .as_object()
            .map(|m| m.iter().map(|(name, us)| (name, f(us))).collect())
            .unwrap_or_default();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        let split: Vec<String> = threads.iter().map(|(name, us)| format!("{name} {us:.1}")).collect();
        println!(
            "server CPU: {:.1} µs per acked delivery ({:.2} s in all); by thread: {}",
            f(&cpu["us_per_acked"]),
            f(&cpu["total_s"]),
            split.join(", ")
        );
        if let (Some(rss), Some(peak)) = (cpu["rss_mib"].as_f64(), cpu["peak_rss_mib"].as_f64()) {
            println!("server memory: {rss:.1} MiB resident at the end, {peak:.1} MiB at the peak");
        }
    }
    println!("outcomes: {}", r["outcomes"]);
    println!(
        "retries: {} after 5xx, {} after IO errors; {} rejected with 4xx; {} gave up",
        r["retried_5xx"], r["retried_io"], r["rejected_4xx"], r["gave_up"]
    );
    if let Some(probes) = r["probes"].as_object() {
        println!("probe            count  failures  p50 ms  p99 ms  max ms");
        for (name, row) in probes {
            println!(
                "{name:<15}  {:>5}  {:>8}  {:>6.2}  {:>6.2}  {:>6.2}",
                row["count"].as_u64().unwrap_or(0),
                row["failures"].as_u64().unwrap_or(0),
                f(&row["p50"]),
                f(&row["p99"]),
                f(&row["max"])
            );
        }
    }
    if let Some(v) = r.get("verify") {
        println!("verify: {v}");
    }
}

/// p50, p90, p99 and max in milliseconds (nearest rank).
pub(super) fn percentiles(micros: &mut [u32]) -> Value {
    micros.sort_unstable();
    let pct = |p: f64| -> f64 {
        if micros.is_empty() {
            return 0.0;
        }
        let i = ((micros.len() as f64 * p).ceil() as usize).clamp(1, micros.len()) - 1;
        f64::from(micros[i]) / 1000.0
    };
    json!({ "p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "max": pct(1.0) })
}

/// One row per second of the run: acked deliveries answered in that second and their latency. Answers after the
/// last full second (the deliveries in flight at the deadline) count in the totals only.
pub(super) fn per_second(samples: &[(u32, u32)], secs: u64) -> Value {
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); secs as usize];
    for &(at_ms, micros) in samples {
        if let Some(b) = buckets.get_mut((at_ms / 1000) as usize) {
            b.push(micros);
        }
    }
    buckets
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            let mut row = percentiles(b);
            row["second"] = json!(i + 1);
            row["acked"] = json!(b.len());
            row
        })
        .collect()
}
