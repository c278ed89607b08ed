#!/usr/bin/env bash
# Every `payhook-bench bench` scenario once, each on a fresh server with the default settings, back to back.
#
#   scripts/bench-scenarios.sh [sqlite|postgres] [ORDERS] [CONCURRENCY]
#
# sqlite (default): a fresh SQLite file per scenario. postgres: a fresh schema per scenario in
# $PAYHOOK_BENCH_POSTGRES_URL, else $PAYHOOK_TEST_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test (dropped
# at the end). sustained runs for $PAYHOOK_BENCH_DURATION_SECS (default 30) seconds. The flags of each scenario are
# in scripts/bench-lib.sh; every run has --verify. Prints a markdown table, one row per scenario, with payhook's own
# CPU per acknowledged delivery while the deliveries ran (user + system, all threads, `bench --server-pid`), its
# writer thread's and tokio's workers' shares, its peak resident set and, on postgres, the local database's CPU
# per acknowledged delivery (`bench --database-process postgres`: meaningful when nothing else uses it).
set -euo pipefail
backend=${1:-sqlite}
orders=${2:-30000}
concurrency=${3:-64}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
# From the repository, so that cargo reads its .cargo/config.toml (how the bundled SQLite is compiled).
cd "$root"
db=${PAYHOOK_BENCH_POSTGRES_URL:-${PAYHOOK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}}
case $backend in sqlite|postgres) ;; *) echo "usage: $0 [sqlite|postgres] [ORDERS] [CONCURRENCY]" >&2; exit 2 ;; esac
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p payhook
bench_bin=$(bench_binary)
bin="${CARGO_TARGET_DIR:-$root/target}/release/payhook"
work=$(mktemp -d)
run=$(printf '%08x' $((RANDOM * RANDOM)))
pids=()
schemas=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for s in "${schemas[@]}"; do psql -q "$db" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
sep='?'; [[ $db == *\?* ]] && sep='&'
scenarios=(steady dup-storm refund-first sustained)

run_scenario() { # scenario port
  local scenario=$1 port=$2 storage
  if [[ $backend == sqlite ]]; then
    storage="url = \"sqlite://$work/$scenario.db\""
  else
    local schema="payhook_bench_${run}_${scenario//-/_}"
    schemas+=("$schema")
    psql -q "$db" -c "CREATE SCHEMA $schema" >/dev/null
    storage="url = \"$db${sep}options=-csearch_path%3D$schema\""
  fi
  bench_config "$work/$scenario.toml" "$port" "$storage"
  "$bin" --config "$work/$scenario.toml" serve 2>>"$work/serve.log" &
  pids+=($!)
  wait_ready "$port" "$work/serve.log"
  mapfile -t args < <(scenario_args "$scenario" "$orders" "$concurrency")
  local database=()
  [[ $backend == postgres ]] && database=(--database-process postgres)
  "$bench_bin" --config "$work/$scenario.toml" bench "${args[@]}" --verify --json --server-pid "${pids[-1]}" \
    "${database[@]}" > "$work/$scenario.json"
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'   # gone: its id may be another process's by the time cleanup runs
}

port=18380
for s in "${scenarios[@]}"; do
  port=$((port + 1))
  run_scenario "$s" "$port"
done

python3 - "$work" "$backend" "${scenarios[@]}" <<'PY'
import json, sys
work, backend, scenarios = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"payhook-bench bench scenarios on {backend}, each on a fresh server")
print()
print("| scenario | command line | deliveries | acked/s | p50 ms | p99 ms | max ms | CPU µs/acked | writer µs/acked "
      "| workers µs/acked | database CPU µs/acked | peak RSS MiB | violations |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in scenarios:
    r = json.load(open(f"{work}/{s}.json"))
    l = r["latency_ms"]
    c = r["server_cpu"]
    threads = c["by_thread_us_per_acked"]
    database = r.get("database_cpu", {}).get("us_per_acked")  # SQLite has no database process
    print(f"| {s} | `{r['command']}` | {r['deliveries']} | {r['acked_per_s']:.0f} | {l['p50']:.2f} | {l['p99']:.2f} "
          f"| {l['max']:.2f} | {c['us_per_acked']:.1f} | {threads.get('sqlite-writer', 0.0):.1f} "
          f"| {threads.get('tokio-rt-worker', 0.0):.1f} | {'–' if database is None else f'{database:.1f}'} "
          f"| {c['peak_rss_mib']:.1f} | {r['verify']['violations']} |")
for s in scenarios:
    r = json.load(open(f"{work}/{s}.json"))
    if "per_second" in r:
        print()
        print(f"{s}, per second:")
        print()
        print("| second | acked/s | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|")
        for row in r["per_second"]:
            print(f"| {row['second']} | {row['acked']} | {row['p50']:.2f} | {row['p99']:.2f} | {row['max']:.2f} |")
PY
