#!/usr/bin/env bash
# What history costs: the steady scenario against one database grown step by step to each size, with and without an
# operator's tools reading at the same time.
#
#   scripts/bench-scale.sh [SIZE ...]            (default: 0 1000000 10000000 stored deliveries)
#
# SQLite by default, in $PAYHOOK_SCALE_DIR (default: a new temporary directory, removed afterwards unless
# $PAYHOOK_SCALE_KEEP=1). With $PAYHOOK_SCALE_POSTGRES_URL set, PostgreSQL instead: the database it names is emptied
# first (every payhook table is dropped).
#
# For each size, in increasing order: `payhook-bench prefill` grows the database to that many stored deliveries (paid
# orders, through the store's own operations, received over the last day; the benchmark's own deliveries count
# too), a server starts with retention off, and $PAYHOOK_BENCH_ROUNDS rounds (default 2) each run the steady
# scenario twice, interleaved: once alone ("quiet") and once while a scraper reads /metrics every 2 s and readers
# poll /v1/stats, /v1/events (newest page, and status=deferred), /v1/outbox?status=dead every second and /readyz
# every 0.5 s ("read"). Reported per size and mode (medians over the rounds): acked/s, delivery p99, the server's
# own CPU per delivery, the largest WAL seen (SQLite), each probe's p50/p99, the database size and bytes per stored
# delivery.
set -euo pipefail
sizes=("$@")
(( ${#sizes[@]} )) || sizes=(0 1000000 10000000)
rounds=${PAYHOOK_BENCH_ROUNDS:-2}
orders=${PAYHOOK_SCALE_ORDERS:-20000}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "PAYHOOK_BENCH_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
cd "$root"
cargo build --release --quiet -p payhook
bench_bin=$(bench_binary)
bin="${CARGO_TARGET_DIR:-$root/target}/release/payhook"
mapfile -t bench_args < <(scenario_args steady "$orders" 64)
work=${PAYHOOK_SCALE_DIR:-$(mktemp -d)}
mkdir -p "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ ${PAYHOOK_SCALE_KEEP:-} == 1 || -n ${PAYHOOK_SCALE_DIR:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
ticks=$(getconf CLK_TCK)
pg=${PAYHOOK_SCALE_POSTGRES_URL:-}
db="$work/scale.db"
port=18481

if [[ -n $pg ]]; then
  storage="url = \"$pg\""
  [[ ${PAYHOOK_SCALE_REUSE:-} == 1 ]] ||
    psql "${pg%%\?*}" -qAt -c "DROP SCHEMA public CASCADE; CREATE SCHEMA public;" >/dev/null
else
  storage="url = \"sqlite://$db\""
fi
bench_config "$work/payhook.toml" "$port" "$storage
[retention]
enabled = false"

stored() { # deliveries stored now, from the server-independent stats command
  "$bin" --config "$work/payhook.toml" stats --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(sum(s["events"].values()) if isinstance(s["events"], dict) else sum(r["count"] for r in s["events"]))'
}

db_bytes() {
  if [[ -n $pg ]]; then
    psql "${pg%%\?*}" -qAt -c "SELECT pg_database_size(current_database())"
  else
    stat -c %s "$db"
  fi
}

wal_watch() { # samples the WAL's size every 0.2 s into $1 until killed
  while :; do stat -c %s "$db-wal" 2>/dev/null || echo 0; sleep 0.2; done > "$1"
}

bench_once() { # label size round
  local label=$1 size=$2 round=$3 out="$work/$2-$1-$3"
  local extra=()
  [[ $label == read ]] && extra=(--scrape-ms 2000 --read-ms 1000)
  "$bin" --config "$work/payhook.toml" serve 2>>"$work/server.log" &
  local pid=$!
  pids+=("$pid")
  wait_ready "$port" "$work/server.log"
  local watcher=
  if [[ -z $pg ]]; then wal_watch "$out.wal" & watcher=$!; fi
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$bench_bin" --config "$work/payhook.toml" bench "${bench_args[@]}" "${extra[@]}" --json > "$out.json"
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  [[ -n $watcher ]] && kill "$watcher" 2>/dev/null
  echo "$(( (after - before) * 1000000 / ticks ))" > "$out.cpu_us"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'
  db_bytes > "$out.bytes"
  stored > "$out.stored"
}

for size in "${sizes[@]}"; do
  have=$(stored)
  if (( size > have )); then
    echo "prefill: $have → $size stored deliveries" >&2
    "$bench_bin" --config "$work/payhook.toml" prefill --source payments --deliveries $(( size - have )) --json \
      > "$work/prefill-$size.json"
  fi
  for round in $(seq "$rounds"); do
    for label in quiet read; do
      echo "size $size, round $round, $label" >&2
      bench_once "$label" "$size" "$round"
    done
  done
done

python3 - "$work" "$rounds" "${sizes[@]}" <<'PY'
import json, os, statistics, sys
work, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
print(f"steady scenario, {rounds} rounds per size and mode, quiet and read interleaved; medians")
print("| stored | mode | acked/s | p99 ms | server CPU µs/delivery | max WAL MB | /metrics p99 ms | /v1/stats p99 ms | /v1/events p99 ms | events?status=deferred p99 ms | /readyz p99 ms | probe failures | DB MB | bytes/delivery |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for size in sizes:
    for label in ("quiet", "read"):
        runs = []
        for r in range(1, rounds + 1):
            base = f"{work}/{size}-{label}-{r}"
            rep = json.load(open(base + ".json"))
            rep["cpu"] = int(open(base + ".cpu_us").read()) / rep["deliveries"]
            rep["bytes"] = int(open(base + ".bytes").read())
            rep["stored"] = int(open(base + ".stored").read())
            wal = [int(x) for x in open(base + ".wal").read().split()] if os.path.exists(base + ".wal") else [0]
            rep["wal"] = max(wal or [0])
            runs.append(rep)
        probes = lambda name: med(r["probes"][name]["p99"] for r in runs) if label == "read" else None
        fmt = lambda v: "–" if v is None else f"{v:.1f}"
        failures = sum(p["failures"] for r in runs for p in r.get("probes", {}).values()) if label == "read" else "–"
        last = runs[-1]
        print(f"| {int(size):,} | {label} | {med(r['acked_per_s'] for r in runs):.0f} | "
              f"{med(r['latency_ms']['p99'] for r in runs):.1f} | {med(r['cpu'] for r in runs):.1f} | "
              f"{max(r['wal'] for r in runs) / 2**20:.1f} | {fmt(probes('metrics'))} | {fmt(probes('stats'))} | "
              f"{fmt(probes('events_newest'))} | {fmt(probes('events_deferred'))} | {fmt(probes('readyz'))} | "
              f"{failures} | {last['bytes'] / 2**20:.0f} | {last['bytes'] / max(last['stored'], 1):.0f} |")
PY
