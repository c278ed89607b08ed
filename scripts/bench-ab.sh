#!/usr/bin/env bash
# Two builds of payhook against each other, in one run: same machine, same workload, interleaved.
#
#   scripts/bench-ab.sh BINARY_A BINARY_B [ORDERS] [CONCURRENCY] [SCENARIO]
#
# Each round starts each build as a server on a fresh SQLite file (default settings, one hmac source) and drives it
# with the same `payhook-bench bench … --verify` client (this checkout's release build, or $PAYHOOK_BENCH_BIN), so
# only the server differs: either binary may be an older build, from before the load generator left payhook.
# Besides acked/s it reads the server's own CPU time (user + system, all threads, from /proc/PID/stat) per
# acknowledged delivery while the deliveries ran (`bench --server-pid`), its writer thread's share and its peak
# resident set, and the server's CPU over the whole run (registration and --verify included) per delivery: the load
# generator shares the cores, so acked/s alone mixes the client's cost into the server's. $PAYHOOK_BENCH_ROUNDS rounds (default 3); the ratios
# are of the medians, B over A.
#
# PAYHOOK_BENCH_AB_SQLITE_FILE=PATH runs every server, one after the other, on that existing SQLite file (grown
# beforehand, e.g. by `payhook-bench prefill`, to measure a database with history; retention off) instead of a fresh
# one.
# PAYHOOK_BENCH_AB_SQLITE_FILE_B=PATH gives B a file of its own (a copy grown the same way), for builds whose
# migrations leave the two files' schemas different.
#
# PAYHOOK_BENCH_AB_BACKEND=postgres runs each server on a fresh schema of $PAYHOOK_BENCH_POSTGRES_URL (else
# $PAYHOOK_TEST_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test) instead, dropped at the end, and also
# reports the database's CPU per acknowledged delivery while the deliveries ran (`bench --database-process
# postgres`: every local process of that name; meaningful only when the server is on this machine and nothing
# else uses it).
set -euo pipefail
a=$(realpath "$1") b=$(realpath "$2")
orders=${3:-20000}
concurrency=${4:-64}
scenario=${5:-steady}
rounds=${PAYHOOK_BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "PAYHOOK_BENCH_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
bench_bin=$(bench_binary)
mapfile -t bench_args < <(scenario_args "$scenario" "$orders" "$concurrency")
# $PAYHOOK_BENCH_AB_ARGS: more `payhook-bench bench` flags for every run (e.g. "--client reqwest").
read -r -a extra_args <<< "${PAYHOOK_BENCH_AB_ARGS:-}"
bench_args+=("${extra_args[@]}")
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
    bench_config "$file.toml" "$port" "url = \"$db${sep}options=-csearch_path%3D$schema\"" "$bin"
  elif [[ -n ${PAYHOOK_BENCH_AB_SQLITE_FILE:-} ]]; then
    local grown=$PAYHOOK_BENCH_AB_SQLITE_FILE
    [[ $label == B ]] && grown=${PAYHOOK_BENCH_AB_SQLITE_FILE_B:-$grown}
    bench_config "$file.toml" "$port" "url = \"sqlite://$grown\"
[retention]
enabled = false" "$bin"
  else
    bench_config "$file.toml" "$port" "url = \"sqlite://$file.db\"" "$bin"
  fi
  "$bin" --config "$file.toml" serve 2>"$file.log" &
  local pid=$!
  pids+=("$pid")
  wait_ready "$port" "$file.log"
  local before after database=()
  [[ $backend == postgres ]] && database=(--database-process postgres)
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$bench_bin" --config "$file.toml" bench "${bench_args[@]}" --verify --json --server-pid "$pid" "${database[@]}" > "$file.json"
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
def writer(r):
    threads = r["server_cpu"]["by_thread_us_per_acked"]
    return threads.get("sqlite-writer", 0.0)  # PostgreSQL has no writer thread: its work is in the database
def database(r):
    return r.get("database_cpu", {}).get("us_per_acked", 0.0)  # SQLite has no database process
print("| build | round | deliveries | acked/s | p99 ms | CPU µs/acked | sqlite-writer µs/acked | CPU µs/delivery, whole run | database CPU µs/acked | peak RSS MiB | violations |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for label in "AB":
    for i, r in enumerate(runs[label], 1):
        whole = r["cpu_us"] / r["deliveries"]
        c = r["server_cpu"]
        print(f"| {label} | {i} | {r['deliveries']} | {r['acked_per_s']:.0f} | {r['latency_ms']['p99']:.2f} | "
              f"{c['us_per_acked']:.1f} | {writer(r):.1f} | {whole:.1f} | {database(r):.1f} | {c['peak_rss_mib']:.1f} | {r['verify']['violations']} |")
def med(l, f):
    return statistics.median(f(r) for r in runs[l])
ratios = {
    "acked/s": lambda r: r["acked_per_s"],
    "p99": lambda r: r["latency_ms"]["p99"],
    "CPU per acked delivery": lambda r: r["server_cpu"]["us_per_acked"],
    "writer CPU per acked delivery": writer,
    "CPU per delivery, whole run": lambda r: r["cpu_us"] / r["deliveries"],
    "database CPU per acked delivery": database,
    "peak RSS": lambda r: r["server_cpu"]["peak_rss_mib"],
}
print("B / A (medians): " + ", ".join(f"{k} {med('B', f) / med('A', f):.3f}x" for k, f in ratios.items()
                                      if med("A", f) > 0))
PY
