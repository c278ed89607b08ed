#!/usr/bin/env bash
# Two builds of payhook against each other, in one run: same machine, same workload, interleaved.
#
#   scripts/bench-ab.sh BINARY_A BINARY_B [ORDERS] [CONCURRENCY] [SCENARIO]
#
# Each round starts each build as a server on a fresh SQLite file (default settings, one hmac source) and drives it
# with the same `payhook bench … --verify` client (BINARY_B's), so only the server differs. Besides acked/s it reads
# the server's own CPU time (user + system, from /proc/PID/stat) and reports it per delivery: the load generator
# shares the cores, so acked/s alone mixes the client's cost into the server's. $PAYHOOK_BENCH_ROUNDS rounds
# (default 3); the ratios are of the medians, B over A.
#
# PAYHOOK_BENCH_AB_BACKEND=postgres runs each server on a fresh schema of $PAYHOOK_BENCH_POSTGRES_URL (else
# $PAYHOOK_TEST_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test) instead, dropped at the end.
set -euo pipefail
a=$(realpath "$1") b=$(realpath "$2")
orders=${3:-20000}
concurrency=${4:-64}
scenario=${5:-steady}
rounds=${PAYHOOK_BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "PAYHOOK_BENCH_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
mapfile -t bench_args < <(scenario_args "$scenario" "$orders" "$concurrency")
work=$(mktemp -d)
pids=()
schemas=()
backend=${PAYHOOK_BENCH_AB_BACKEND:-sqlite}
[[ $backend == sqlite || $backend == postgres ]] || { echo "PAYHOOK_BENCH_AB_BACKEND: sqlite or postgres" >&2; exit 2; }
db=${PAYHOOK_BENCH_POSTGRES_URL:-${PAYHOOK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}}
sep='?'; [[ $db == *\?* ]] && sep='&'
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for s in "${schemas[@]}"; do psql -q "$db" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
ticks=$(getconf CLK_TCK)

run() { # label binary round port
  local label=$1 bin=$2 round=$3 port=$4 file="$work/$1-$3"
  if [[ $backend == postgres ]]; then
    local schema="payhook_ab_$$_${label,,}_$round"
    schemas+=("$schema")
    psql -q "$db" -c "CREATE SCHEMA $schema" >/dev/null
    bench_config "$file.toml" "$port" "url = \"$db${sep}options=-csearch_path%3D$schema\""
  else
    bench_config "$file.toml" "$port" "url = \"sqlite://$file.db\""
  fi
  "$bin" --config "$file.toml" serve 2>"$file.log" &
  local pid=$!
  pids+=("$pid")
  wait_ready "$port" "$file.log"
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$b" --config "$file.toml" bench "${bench_args[@]}" --verify --json > "$file.json"
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo "$(( (after - before) * 1000000 / ticks ))" > "$file.cpu_us"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'
}

port=18381
for round in $(seq "$rounds"); do
  for label in A B; do
    if [[ $label == A ]]; then bin=$a; else bin=$b; fi
    run "$label" "$bin" "$round" "$port"
    port=$((port + 1))
  done
done

python3 - "$work" "$rounds" "$a" "$b" "$backend" <<'PY'
import json, statistics, sys
work, rounds, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {}
for label in "AB":
    runs[label] = []
    for r in range(1, rounds + 1):
        report = json.load(open(f"{work}/{label}-{r}.json"))
        report["cpu_us"] = int(open(f"{work}/{label}-{r}.cpu_us").read())
        runs[label].append(report)
print(runs["A"][0]["command"].rsplit(" --seed ", 1)[0], f"  ({rounds} rounds, A and B interleaved, {sys.argv[5]})")
print(f"A = {a}\nB = {b}")
print("| build | round | deliveries | acked/s | server CPU µs/delivery | p99 ms | violations |")
print("|---|---|---|---|---|---|---|")
for label in "AB":
    for i, r in enumerate(runs[label], 1):
        per = r["cpu_us"] / r["deliveries"]
        print(f"| {label} | {i} | {r['deliveries']} | {r['acked_per_s']:.0f} | {per:.1f} | {r['latency_ms']['p99']:.2f} | {r['verify']['violations']} |")
acked = {l: statistics.median(r["acked_per_s"] for r in runs[l]) for l in "AB"}
cpu = {l: statistics.median(r["cpu_us"] / r["deliveries"] for r in runs[l]) for l in "AB"}
print(f"B / A: acked/s {acked['B'] / acked['A']:.3f}x, server CPU per delivery {cpu['B'] / cpu['A']:.3f}x (medians)")
PY
