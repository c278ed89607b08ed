#!/usr/bin/env bash
# Group commit against one commit per event, on SQLite, in one run: same machine, same workload, back to back.
#
#   scripts/bench-sqlite.sh [ORDERS] [CONCURRENCY] [SCENARIO]
#
# Starts three payhook servers on fresh SQLite files (group commit with pipelined fsync — the default —, group
# commit with synchronous=FULL inside COMMIT, and one commit per event), drives each with
# `payhook bench --scenario SCENARIO … --verify` (steady by default: `--dup 0.2 --refund 0.1 --shuffle`; the other
# scenarios' flags are in scripts/bench-lib.sh), and prints one line per mode plus the ratios.
set -euo pipefail
orders=${1:-30000}
concurrency=${2:-64}
scenario=${3:-steady}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
mapfile -t bench_args < <(scenario_args "$scenario" "$orders" "$concurrency")
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p payhook
bin="${CARGO_TARGET_DIR:-$root/target}/release/payhook"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token

run_mode() { # name port storage-toml
  local name=$1 port=$2 storage=$3
  cat > "$work/$name.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
[storage]
url = "sqlite://$work/$name.db"
$storage
[[sources]]
name = "payments"
scheme = "hmac"
header = "X-Webhook-Signature"
format = "generic"
secrets = ["whsec_bench_secret"]
TOML
  "$bin" --config "$work/$name.toml" serve 2>"$work/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  "$bin" --config "$work/$name.toml" bench "${bench_args[@]}" --verify --json > "$work/$name.json"
  kill "${pids[-1]}"
}

run_mode group-pipelined 18181 'fsync = "pipelined"'
run_mode group-in-commit 18182 'fsync = "in-commit"'
run_mode per-event 18183 'group_commit = false'

python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
rows = {m: json.load(open(f"{work}/{m}.json")) for m in ("group-pipelined", "group-in-commit", "per-event")}
print(rows["group-pipelined"]["command"].rsplit(" --seed ", 1)[0])
print("| mode | deliveries | acked/s | p50 ms | p99 ms | max ms | violations |")
print("|---|---|---|---|---|---|---|")
for m, r in rows.items():
    l = r["latency_ms"]
    print(f"| {m} | {r['deliveries']} | {r['acked_per_s']:.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {l['max']:.2f} | {r['verify']['violations']} |")
base = rows["per-event"]["acked_per_s"]
for m in ("group-pipelined", "group-in-commit"):
    print(f"{m} / per-event: {rows[m]['acked_per_s'] / base:.1f}x")
PY
