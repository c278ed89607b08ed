#!/usr/bin/env bash
# The dispatcher's throughput to a healthy HTTP sink, two builds against each other in one run, and what one key
# that keeps failing costs the others.
#
#   scripts/bench-dispatch.sh BINARY_A BINARY_B [ORDERS] [MAX_IN_FLIGHT]
#
# Each round, for A, for B and for B with a failing key (in that order): a server on a fresh SQLite file with its
# dispatcher off takes `payhook-bench bench` (steady, ORDERS orders: every order paid, a tenth refunded, a fifth of
# the deliveries duplicated; --verify waits for every deferral to settle), so the outbox holds one row per receipt,
# each order its own key. Then `payhook-bench sink` listens and the server starts again with its dispatcher on and
# one sink taking order.paid and order.refunded (MAX_IN_FLIGHT requests at once, default 16). The sink acknowledges
# every row at once ("B, one key failing": except every row of the first order it hears of, answered 500) and
# reports rows per second between its first request and its last acknowledgement, rows received again, and
# orders whose order.paid came after their order.refunded. The server's CPU time (user + system, whole process, from
# /proc) per acknowledged row covers its start and the whole dispatch.
#
# $PAYHOOK_BENCH_ROUNDS rounds (default 3); the ratios are of the medians. The load generator and sink are this
# checkout's `payhook-bench` (or $PAYHOOK_BENCH_BIN).
set -euo pipefail
a=$(realpath "$1") b=$(realpath "$2")
orders=${3:-20000}
in_flight=${4:-16}
rounds=${PAYHOOK_BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "PAYHOOK_BENCH_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
bench_bin=$(bench_binary)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
ticks=$(getconf CLK_TCK)

run() { # label binary round port fail(0|1)
  local label=$1 bin=$2 round=$3 port=$4 fail=$5 file="$work/$1-$3"
  local sink_port=$((port + 100))
  bench_config "$file.toml" "$port" "url = \"sqlite://$file.db\"" "$bin"
  cat >> "$file.toml" <<TOML
[dispatcher]
enabled = false
[[sinks]]
name = "shop"
url = "http://127.0.0.1:$sink_port/in"
kinds = ["order.paid", "order.refunded"]
max_in_flight = $in_flight
TOML
  "$bin" --config "$file.toml" serve 2>"$file.fill.log" &
  local pid=$!
  pids+=("$pid")
  wait_ready "$port" "$file.fill.log"
  "$bench_bin" --config "$file.toml" bench --source payments --orders "$orders" --concurrency 64 \
    --dup 0.2 --refund 0.1 --verify --json > "$file.fill.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'

  sed -i 's/^enabled = false$/enabled = true/' "$file.toml"
  local sink_flags=()
  [[ $fail == 1 ]] && sink_flags=(--fail-first-key)
  "$bench_bin" sink --listen "127.0.0.1:$sink_port" "${sink_flags[@]}" > "$file.sink.json" &
  local sink_pid=$!
  pids+=("$sink_pid")
  "$bin" --config "$file.toml" serve 2>"$file.log" &
  pid=$!
  pids+=("$pid")
  wait "$sink_pid"
  awk '{print $14 + $15}' "/proc/$pid/stat" > "$file.ticks"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pids=()
}

port=18481
for round in $(seq "$rounds"); do
  for label in A B F; do
    case $label in A) bin=$a fail=0 ;; B) bin=$b fail=0 ;; F) bin=$b fail=1 ;; esac
    run "$label" "$bin" "$round" "$port" "$fail"
    port=$((port + 1))
  done
done

python3 - "$work" "$rounds" "$a" "$b" "$orders" "$in_flight" "$ticks" <<'PY'
import json, statistics, sys
work, rounds, a, b, orders, in_flight, ticks = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5], *sys.argv[5:7], int(sys.argv[7])
names = {"A": "A", "B": "B", "F": "B, one key failing"}
runs = {label: [] for label in names}
for label in names:
    for r in range(1, rounds + 1):
        sink = json.load(open(f"{work}/{label}-{r}.sink.json"))
        cpu_us = int(open(f"{work}/{label}-{r}.ticks").read()) * 1_000_000 / ticks
        sink["cpu_us_per_row"] = cpu_us / max(sink["acknowledged"], 1)
        runs[label].append(sink)
print(f"scripts/bench-dispatch.sh A B {orders} {in_flight}  ({rounds} rounds, A, B and B with a failing key interleaved)")
print(f"A = {a}\nB = {b}")
print("| build | round | rows acknowledged | rows/s | server CPU µs/row | received again | paid after refunded | 500s to the failing key |")
print("|---|---|---|---|---|---|---|---|")
for label, name in names.items():
    for i, r in enumerate(runs[label], 1):
        print(f"| {name} | {i} | {r['acknowledged']} | {r['rows_per_s']:.0f} | {r['cpu_us_per_row']:.1f} | "
              f"{r['received_again']} | {r['paid_after_refund']} | {r['failed_answers']} |")
def med(label, key):
    return statistics.median(r[key] for r in runs[label])
print(f"B / A (medians): rows/s {med('B', 'rows_per_s') / med('A', 'rows_per_s'):.3f}x, "
      f"server CPU per row {med('B', 'cpu_us_per_row') / med('A', 'cpu_us_per_row'):.3f}x")
print(f"B with one key failing / B (medians): rows/s {med('F', 'rows_per_s') / med('B', 'rows_per_s'):.3f}x, "
      f"server CPU per row {med('F', 'cpu_us_per_row') / med('B', 'cpu_us_per_row'):.3f}x")
PY
