//! payhook's own CPU time while the benchmark delivers, for a server on this machine (`--server-pid`): the
//! process's user + system time from `/proc/<pid>/stat`, and each thread's from `/proc/<pid>/task/<tid>/stat`,
//! grouped by thread name. The load generator shares the machine's cores, so throughput alone says little about
//! what a delivery costs payhook; this does.
//!
//! Time a thread spent before it exited during the run is in the process's total but in no live thread's: it is
//! reported as `exited threads`. The process's memory comes from `/proc/<pid>/status` at the end of the run: its
//! resident set then (`VmRSS`) and the peak since it started (`VmHWM`).

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io;

/// `/proc` reports times in clock ticks of `USER_HZ`, which Linux fixes at 100 for user space on every
/// architecture it supports.
const TICKS_PER_SEC: u64 = 100;

/// The CPU times of a process and of each of its live threads, in clock ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CpuSnapshot {
    total: u64,
    /// Thread id → (thread name, ticks).
    threads: BTreeMap<u32, (String, u64)>,
    /// Resident set now and its peak since the process started, in KiB (`None` where `/proc` does not say).
    rss_kib: Option<u64>,
    peak_rss_kib: Option<u64>,
}

impl CpuSnapshot {
    /// Reads `/proc/<pid>` now.
    pub(super) fn read(pid: u32) -> io::Result<Self> {
        let total = stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?)?.1;
        let mut threads = BTreeMap::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let entry = entry?;
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else { continue };
            // A thread may exit between the listing and the read: it is then counted under `exited threads`.
            if let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) {
                threads.insert(tid, stat_ticks(&text)?);
            }
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Ok(Self { total, threads, rss_kib: status_kib(&status, "VmRSS:"), peak_rss_kib: status_kib(&status, "VmHWM:") })
    }

    /// The CPU spent from `before` to `self`, as microseconds per acknowledged delivery, in all and by thread
    /// name (threads of one name, such as tokio's workers, added together).
    pub(super) fn since(&self, before: &CpuSnapshot, acked: usize) -> Value {
        let per = |ticks: u64| us_per_acked(ticks, acked);
        let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
        let mut live = 0;
        for (tid, (name, ticks)) in &self.threads {
            let earlier = before.threads.get(tid).map_or(0, |(_, t)| *t);
            let spent = ticks.saturating_sub(earlier);
            live += spent;
            *by_name.entry(name.as_str()).or_default() += spent;
        }
        // The threads are read just after the process, so their sum can run a tick ahead of the process's total:
        // the total is then that sum, and no time is put down to exited threads.
        let total = self.total.saturating_sub(before.total).max(live);
        let exited = total - live;
        if exited > 0 {
            by_name.insert("exited threads", exited);
        }
        let rows: Vec<(&str, u64)> = by_name.into_iter().filter(|(_, t)| *t > 0).collect();
        let mib = |kib: Option<u64>| kib.map(|k| k as f64 / 1024.0);
        json!({
            "rss_mib": mib(self.rss_kib),
            "peak_rss_mib": mib(self.peak_rss_kib),
            "total_s": total as f64 / TICKS_PER_SEC as f64,
            "us_per_acked": per(total),
            "by_thread_us_per_acked": rows.iter().map(|(n, t)| ((*n).to_owned(), json!(per(*t)))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// The CPU ticks (user + system) spent so far by every process on this machine whose name is `name` (the name
/// `/proc/<pid>/stat` gives, e.g. `postgres` for PostgreSQL's server processes). A process that exits between the
/// listing and the read is left out.
pub(super) fn ticks_of_processes_named(name: &str) -> io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        if !entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) {
            let (process, ticks) = stat_ticks(&text)?;
            if process == name {
                total += ticks;
            }
        }
    }
    Ok(total)
}

/// `ticks` spent by the processes named `name`, as microseconds per acknowledged delivery.
pub(super) fn per_acked(name: &str, ticks: u64, acked: usize) -> Value {
    json!({
        "process": name,
        "total_s": ticks as f64 / TICKS_PER_SEC as f64,
        "us_per_acked": us_per_acked(ticks, acked),
    })
}

/// `ticks` of CPU as microseconds per acknowledged delivery.
fn us_per_acked(ticks: u64, acked: usize) -> f64 {
    ticks as f64 * 1e6 / TICKS_PER_SEC as f64 / acked.max(1) as f64
}

/// The value in KiB of a `/proc/<pid>/status` field such as `VmHWM:` (written `VmHWM:   123456 kB`).
fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().strip_suffix("kB")?.trim().parse().ok()
}

/// The name and the user + system ticks of one `stat` line. The name is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
fn stat_ticks(text: &str) -> io::Result<(String, u64)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("not a /proc stat line: {text:?}"));
    let open = text.find('(').ok_or_else(bad)?;
    let close = text.rfind(')').ok_or_else(bad)?;
    let name = text.get(open + 1..close).ok_or_else(bad)?.to_owned();
    // After the name: state (field 3), …, utime (field 14), stime (field 15).
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).ok_or_else(bad);
    Ok((name, tick(11)? + tick(12)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processes_of_a_name_are_added_up_and_include_this_one() {
        // Burn a few ticks so that this process has some to count.
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let (name, own) = stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert!(own > 0, "50 ms of work shows in this process's ticks");
        let all = ticks_of_processes_named(&name).unwrap();
        assert!(all >= own, "{all} ticks for every {name:?} process, {own} for this one alone");
        assert_eq!(ticks_of_processes_named("no process has this name").unwrap(), 0);
        assert_eq!(per_acked("postgres", 250, 1_000)["us_per_acked"], json!(2_500.0));
    }

    #[test]
    fn a_stat_line_gives_its_name_and_user_plus_system_ticks_even_with_a_name_holding_parentheses() {
        let line = "4242 (sqlite (writer)) S 1 4242 4242 0 -1 4194560 1075 0 0 0 731 269 0 0 20 0 9 0 1234 0 0";
        assert_eq!(stat_ticks(line).unwrap(), ("sqlite (writer)".to_owned(), 1000));
        assert!(stat_ticks("garbage").is_err());
    }

    #[test]
    fn cpu_is_split_by_thread_name_with_exited_threads_apart() {
        let snapshot = |total, threads: &[(u32, &str, u64)]| CpuSnapshot {
            total,
            threads: threads.iter().map(|(tid, name, t)| (*tid, ((*name).to_owned(), *t))).collect(),
            rss_kib: Some(51_200),
            peak_rss_kib: Some(102_400),
        };
        let before = snapshot(100, &[(1, "payhook", 50), (2, "tokio-runtime-w", 30), (3, "gone", 20)]);
        let after = snapshot(
            500,
            &[(1, "payhook", 50), (2, "tokio-runtime-w", 130), (4, "tokio-runtime-w", 100), (5, "sqlite-writer", 150)],
        );
        // 400 ticks (4 s) over 1,000 deliveries: 4,000 µs each; 350 of them in live threads, 50 in exited ones.
        let cpu = after.since(&before, 1_000);
        assert_eq!(cpu["us_per_acked"], 4_000.0);
        assert_eq!((cpu["rss_mib"].as_f64(), cpu["peak_rss_mib"].as_f64()), (Some(50.0), Some(100.0)));
        assert_eq!(
            cpu["by_thread_us_per_acked"],
            json!({ "tokio-runtime-w": 2_000.0, "sqlite-writer": 1_500.0, "exited threads": 500.0 })
        );
    }

    #[test]
    fn threads_read_a_tick_after_the_process_make_the_total() {
        let snapshot = |total, t| CpuSnapshot {
            total,
            threads: [(1, ("w".to_owned(), t))].into_iter().collect(),
            rss_kib: None,
            peak_rss_kib: None,
        };
        let cpu = snapshot(12, 13).since(&snapshot(10, 10), 1);
        assert_eq!(cpu["us_per_acked"], 30_000.0);
        assert_eq!(cpu["by_thread_us_per_acked"], json!({ "w": 30_000.0 }));
    }

    #[test]
    fn this_process_can_be_read() {
        let snapshot = CpuSnapshot::read(std::process::id()).expect("/proc of this process");
        assert!(!snapshot.threads.is_empty());
        assert!(snapshot.peak_rss_kib.is_some_and(|peak| peak > 0 && peak >= snapshot.rss_kib.unwrap_or(0)));
        assert_eq!(status_kib("Name:\tx\nVmHWM:\t  123456 kB\n", "VmHWM:"), Some(123_456));
    }
}
