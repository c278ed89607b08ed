#!/usr/bin/env bash
# payhook's own instructions per delivery, counted by valgrind's callgrind, which do not drift with the machine's
# other load (CPU time does): the release server runs under callgrind for two fixed workloads of the steady
# scenario (the same seed, 4 connections, the lean client), and the difference of the two instruction counts over
# the difference of their deliveries is the cost of one delivery, its order's registration included; start-up and
# shutdown cancel out. The load generator runs natively and is not counted.
#
#   scripts/instructions.sh            # prints the figure
#   scripts/instructions.sh --check    # also fails when it is above the number in scripts/instructions-threshold
#
# $PAYHOOK_INSTR_ORDERS sets the two workloads' orders (default "200 800"); $PAYHOOK_INSTR_BIN measures that
# payhook binary instead of building this checkout's (to compare two builds); $PAYHOOK_INSTR_SCENARIO runs another
# scenario of scripts/bench-lib.sh than steady (dup-storm or refund-first: sustained runs for a time, not a fixed
# workload). The threshold is steady's. The load generator is this checkout's `payhook-bench` (or $PAYHOOK_BENCH_BIN),
# whichever payhook it measures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
read -r small large <<< "${PAYHOOK_INSTR_ORDERS:-200 800}"
scenario=${PAYHOOK_INSTR_SCENARIO:-steady}
case $scenario in
  steady|dup-storm|refund-first) ;;
  *) echo "PAYHOOK_INSTR_SCENARIO: steady, dup-storm or refund-first, not $scenario" >&2; exit 2 ;;
esac
if [[ ${1:-} == --check && $scenario != steady ]]; then
  echo "--check compares steady's count with its threshold; unset PAYHOOK_INSTR_SCENARIO" >&2
  exit 2
fi
bin=$(release_binary "${PAYHOOK_INSTR_BIN:-}")
bench_bin=$(bench_binary)
work=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef

measure() { # ORDERS PORT: prints "INSTRUCTIONS DELIVERIES"
  local orders=$1 port=$2 dir="$work/$1"
  mkdir -p "$dir"
  bench_config "$dir/payhook.toml" "$port" "url = \"sqlite://$dir/payhook.db\""
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" "$bin" --config "$dir/payhook.toml" serve \
    2>"$dir/serve.log" &
  pid=$!
  wait_ready "$port" "$dir/serve.log"
  local args
  mapfile -t args < <(scenario_args "$scenario" "$orders" 4)
  "$bench_bin" --config "$dir/payhook.toml" bench --url "http://127.0.0.1:$port" "${args[@]}" --client lean --seed 7 \
    --verify --json > "$dir/report.json"
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
  local instructions
  instructions=$(awk '/^(summary|totals):/ {print $2; exit}' "$dir/callgrind.out")
  [[ -n $instructions ]] || { echo "no instruction count in $dir/callgrind.out" >&2; tail -20 "$dir/serve.log" >&2; exit 1; }
  python3 - "$dir/report.json" "$instructions" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["verify"]["violations"] == 0, report["verify"]
print(sys.argv[2], report["deliveries"])
PY
}

read -r ir_small n_small <<< "$(measure "$small" 18471)"
read -r ir_large n_large <<< "$(measure "$large" 18472)"
per=$(( (ir_large - ir_small) / (n_large - n_small) ))
echo "instructions per delivery: $per  ($scenario, callgrind; $n_small and $n_large deliveries: $ir_small and $ir_large instructions)"
if [[ ${1:-} == --check ]]; then
  threshold=$(grep -v '^#' "$root/scripts/instructions-threshold" | tr -d '[:space:]')
  if (( per > threshold )); then
    echo "instructions per delivery $per are above the threshold $threshold (scripts/instructions-threshold)" >&2
    exit 1
  fi
  echo "under the threshold $threshold"
fi
