#!/usr/bin/env bash
# Group commit against one commit per event, on SQLite, in one run: same machine, same workload, interleaved.
#
#   scripts/bench-sqlite.sh [ORDERS] [CONCURRENCY] [SCENARIO]
#
# Starts payhook servers on fresh SQLite files in three modes (group commit with pipelined fsync — the default —,
# group commit with synchronous=FULL inside COMMIT, and one commit per event), drives each with
# `payhook-bench bench --scenario SCENARIO … --verify` (steady by default: `--dup 0.2 --refund 0.1 --shuffle`; the other
# scenarios' flags are in scripts/bench-lib.sh), and prints one line per mode and round plus the ratios.
#
# The machine is shared, so a burst of someone else's load can land on one mode and not the others. The modes run
# interleaved, $PAYHOOK_BENCH_ROUNDS times (default 3): each round is every mode once, each on a fresh file. The
# table has every round; the ratios are of each mode's median acked/s, and the lowest ratio of a single round is
# printed beside them.
set -euo pipefail
orders=${1:-30000}
concurrency=${2:-64}
scenario=${3:-steady}
rounds=${PAYHOOK_BENCH_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "PAYHOOK_BENCH_ROUNDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
# From the repository, so that cargo reads its .cargo/config.toml (how the bundled SQLite is compiled).
cd "$root"
mapfile -t bench_args < <(scenario_args "$scenario" "$orders" "$concurrency")
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p payhook
bench_bin=$(bench_binary)
bin="${CARGO_TARGET_DIR:-$root/target}/release/payhook"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef

modes=(group-pipelined group-in-commit per-event)
declare -A storage=([group-pipelined]='fsync = "pipelined"' [group-in-commit]='fsync = "in-commit"' \
  [per-event]='group_commit = false')

run_mode() { # name round port
  local name=$1 round=$2 port=$3 file="$work/$1-$2"
  bench_config "$file.toml" "$port" "url = \"sqlite://$file.db\"
${storage[$name]}"
  "$bin" --config "$file.toml" serve 2>"$file.log" &
  pids+=($!)
  wait_ready "$port" "$file.log"
  "$bench_bin" --config "$file.toml" bench "${bench_args[@]}" --verify --json > "$file.json"
  kill "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'   # gone: its id may be another process's by the time cleanup runs
}

port=18181
for round in $(seq "$rounds"); do
  for mode in "${modes[@]}"; do
    run_mode "$mode" "$round" "$port"
    port=$((port + 1))
  done
done

python3 - "$work" "$rounds" "${modes[@]}" <<'PY'
import json, statistics, sys
work, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {m: [json.load(open(f"{work}/{m}-{r}.json")) for r in range(1, rounds + 1)] for m in modes}
print(runs[modes[0]][0]["command"].rsplit(" --seed ", 1)[0], f"  ({rounds} rounds, modes interleaved)")
print("| mode | round | deliveries | acked/s | p50 ms | p99 ms | max ms | violations |")
print("|---|---|---|---|---|---|---|---|")
for m in modes:
    for i, r in enumerate(runs[m], 1):
        l = r["latency_ms"]
        print(f"| {m} | {i} | {r['deliveries']} | {r['acked_per_s']:.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {l['max']:.2f} | {r['verify']['violations']} |")
median = {m: statistics.median(r["acked_per_s"] for r in runs[m]) for m in modes}
for m in modes:
    print(f"{m}: median {median[m]:.0f} acked/s, worst p99 {max(r['latency_ms']['p99'] for r in runs[m]):.2f} ms")
for m in modes[:-1]:
    worst = min(a["acked_per_s"] / b["acked_per_s"] for a, b in zip(runs[m], runs[modes[-1]]))
    print(f"{m} / {modes[-1]}: {median[m] / median[modes[-1]]:.1f}x (medians; lowest single round {worst:.1f}x)")
PY
