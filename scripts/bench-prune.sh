#!/usr/bin/env bash
# What pruning costs live traffic: a database holding N deliveries old enough for retention, a steady load, and
# `payhook prune` run beside the server as a second process.
#
#   scripts/bench-prune.sh [N]          (default 1000000)
#
# SQLite in a temporary directory (or $PAYHOOK_SCALE_DIR). Steps: `payhook-bench prefill` N paid orders received 40 to 50
# days ago (past the default key retention of 30 days, so every one is pruned: its payload, its row, its keys), a
# server with its own retention task off, then back-to-back runs of the steady scenario (20,000 orders each, a few
# seconds): two before the prune (the baseline), as many as the prune takes, and one after. Reported: acked/s and 503 answers per window,
# the operator probes (a scraper on /metrics every 2 s; /v1/stats, /v1/events, /v1/outbox every second; /readyz
# every 0.5 s) in every window, the ingest ratio during the prune against the baseline, the prune's duration and rows per second in its first and
# last quarter (flat when a step costs O(rows pruned)), and the file's size before and after.
set -euo pipefail
n=${1:-1000000}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
cd "$root"
cargo build --release --quiet -p payhook
bench_bin=$(bench_binary)
bin="${CARGO_TARGET_DIR:-$root/target}/release/payhook"
work=${PAYHOOK_SCALE_DIR:-$(mktemp -d)}
mkdir -p "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n ${PAYHOOK_SCALE_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
port=18581
db="$work/prune.db"
rm -f "$db" "$db-wal" "$db-shm"
bench_config "$work/payhook.toml" "$port" "url = \"sqlite://$db\"
[retention]
enabled = false"

echo "prefill: $n deliveries received 40 to 50 days ago" >&2
"$bench_bin" --config "$work/payhook.toml" prefill --source payments --deliveries "$n" --days 10 --days-ago 40 --json \
  > "$work/prefill.json"
size_before=$(stat -c %s "$db")

"$bin" --config "$work/payhook.toml" serve 2>"$work/server.log" &
pids+=($!)
wait_ready "$port" "$work/server.log"

window() { # label index
  "$bench_bin" --config "$work/payhook.toml" bench --source payments --scenario steady --orders 20000 --dup 0.2 \
    --refund 0.1 --shuffle --concurrency 64 --scrape-ms 2000 --read-ms 1000 --json > "$work/window-$1-$2.json"
}

window base 1
window base 2
started=$(date +%s.%N)
PAYHOOK_LOG=payhook_server::runtime::retention=debug "$bin" --config "$work/payhook.toml" prune --json \
  > "$work/prune.json" 2> "$work/prune.log" &
prune=$!
pids+=("$prune")
i=0
while kill -0 "$prune" 2>/dev/null; do
  i=$((i + 1))
  window during "$i"
done
wait "$prune"
finished=$(date +%s.%N)
window after 1
size_after=$(stat -c %s "$db")

python3 - "$work" "$n" "$size_before" "$size_after" "$started" "$finished" <<'PY'
import glob, json, re, statistics, sys
work, n, before, after, started, finished = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
def windows(label):
    out = []
    for path in sorted(glob.glob(f"{work}/window-{label}-*.json"), key=lambda p: int(p.rsplit("-", 1)[1][:-5])):
        r = json.load(open(path))
        p = r.get("probes", {})
        out.append((r["acked_per_s"], r["retried_5xx"], r["latency_ms"]["p99"],
                    p.get("readyz", {}).get("p99", 0), p.get("metrics", {}).get("p99", 0),
                    p.get("events_newest", {}).get("p99", 0), sum(v.get("failures", 0) for v in p.values())))
    return out
base, during, after_w = windows("base"), windows("during"), windows("after")
print(f"prune of {n:,} deliveries beside back-to-back `payhook-bench bench --scenario steady --orders 20000 --dup 0.2 --refund 0.1 --shuffle --concurrency 64`")
print("| window | acked/s | 503 answers | delivery p99 ms | /readyz p99 ms | /metrics p99 ms | /v1/events p99 ms | probe failures |")
print("|---|---|---|---|---|---|---|---|")
for label, ws in (("before", base), ("during prune", during), ("after", after_w)):
    for i, (a, r, p, ready, met, ev, fail) in enumerate(ws, 1):
        print(f"| {label} {i} | {a:.0f} | {r} | {p:.1f} | {ready:.1f} | {met:.1f} | {ev:.1f} | {fail} |")
b = statistics.mean(w[0] for w in base)
full = [w[0] for w in during[:-1]] or [w[0] for w in during]
print(f"ingest during the prune / before: {statistics.mean(full) / b:.3f} (windows entirely inside the prune); "
      f"lowest window {min(full) / b:.3f}; 503 answers during the prune: {sum(w[1] for w in during)}")
pruned = json.load(open(f"{work}/prune.json"))
secs = finished - started
print(f"prune: {json.dumps(pruned)} in {secs:.1f} s, {pruned.get('events_deleted', 0) / secs:.0f} events deleted/s")
steps = []
for line in open(f"{work}/prune.log"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    m = re.search(r"rows=(\d+).*micros=(\d+)", line)
    if m and "pruning step" in line:
        steps.append((int(m.group(1)), int(m.group(2))))
if len(steps) >= 8:
    q = len(steps) // 4
    rate = lambda part: sum(r for r, _ in part) / max(sum(us for _, us in part), 1) * 1e6
    print(f"steps: {len(steps)}; rows per second of step time: first quarter {rate(steps[:q]):.0f}, last quarter {rate(steps[-q:]):.0f}")
print(f"file: {before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after ({(before - after) / max(n, 1):.0f} bytes per pruned delivery given back)")
PY
