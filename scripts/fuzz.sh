#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer) of every parser that faces the internet, and of the whole ingest
# path. Installs cargo-fuzz when it is missing (the nightly toolchain comes with the machine).
#
#   scripts/fuzz.sh SECONDS [TARGET ...]     (default: every target in fuzz/Cargo.toml)
#
# Each target runs for SECONDS on its working corpus (fuzz/corpus/TARGET, kept between runs, not committed) seeded
# from fuzz/seeds/TARGET (committed, small). A crash stops the script with libFuzzer's report; the input is saved
# in fuzz/artifacts/TARGET/ and replays with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/<file>`.
# The last lines are a table: executions, coverage (edges) and corpus size per target.
# $PAYHOOK_FUZZ_TARGET_DIR (default target/fuzz) holds the builds.
set -euo pipefail
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET ...]}
shift
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "SECONDS must be a whole number of at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
targets=("$@")
if (( ${#targets[@]} == 0 )); then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^payhook-fuzz$')
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export CARGO_TARGET_DIR=${PAYHOOK_FUZZ_TARGET_DIR:-$root/target/fuzz}
# No sanitizer: payhook's crates forbid `unsafe`, so AddressSanitizer would mostly slow the search down (it still
# guards SQLite's and ring's C code when asked for: PAYHOOK_FUZZ_SANITIZER=address).
flags=(-s "${PAYHOOK_FUZZ_SANITIZER:-none}" -O)
cargo +nightly fuzz build "${flags[@]}" >&2
summary=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "seeds/$t"
  log=$(mktemp)
  echo "fuzzing $t for ${seconds}s" >&2
  if ! cargo +nightly fuzz run "${flags[@]}" "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 > "$log" 2>&1; then
    tail -60 "$log" >&2
    echo "fuzz target $t failed: see the report above and fuzz/artifacts/$t/" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  summary+=("| $t | ${runs:-?} | ${cov:-?} | $(ls "corpus/$t" | wc -l) |")
  echo "${summary[-1]}" >&2
  rm -f "$log"
done
echo "| target | executions | coverage (edges) | corpus |"
echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
