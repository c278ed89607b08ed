#!/usr/bin/env bash
# Which pages a commit writes: the WAL frames of a `payhook-bench bench` run's commits, copied mid-run, counted by the
# table or index each page belongs to (SQLite's `dbstat`), leaves and interior pages apart.
#
#   scripts/wal-census.sh [ORDERS] [CONCURRENCY] [SCENARIO]
#
# Starts a server on a fresh SQLite file (default settings, the benchmarks' one hmac source), drives it with
# `payhook-bench bench` (steady, 40,000 orders, 64 connections by default) and, once half the orders have had a
# delivery recorded, copies the WAL and the file and reads the frames of the WAL's current generation (those whose
# salts match its header, up to its last complete commit): every frame is one page a commit wrote, a page of log
# and of `fdatasync`. The jobs per commit meanwhile (`payhook_commit_batch_size` from /metrics, just before and
# after the copy) turn frames per commit into frames per job.
# $PAYHOOK_CENSUS_BIN measures that payhook binary instead of building this checkout's. Needs python3 with SQLite's
# `dbstat` table (Debian's has it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
orders=${1:-40000}
mapfile -t bench_args < <(scenario_args "${3:-steady}" "$orders" "${2:-64}")
bin=$(release_binary "${PAYHOOK_CENSUS_BIN:-}")
bench_bin=$(bench_binary)
work=$(mktemp -d)
pid=
bench=
cleanup() {
  for p in $bench $pid; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef
port=18491
bench_config "$work/payhook.toml" "$port" "url = \"sqlite://$work/payhook.db\""
"$bin" --config "$work/payhook.toml" serve 2>"$work/serve.log" &
pid=$!
wait_ready "$port" "$work/serve.log"
"$bench_bin" --config "$work/payhook.toml" bench "${bench_args[@]}" --client lean --json > "$work/report.json" &
bench=$!
metrics() { curl -sf -H "Authorization: Bearer $PAYHOOK_API_TOKEN" "http://127.0.0.1:$port/metrics"; }
delivered() { metrics | awk '/^payhook_deliveries_total/ {n += $2} END {print n + 0}'; }
# Mid-run: once half the orders have had a delivery recorded (registration is over, deliveries in full swing).
until (( $(delivered) > orders / 2 )); do
  kill -0 "$bench" 2>/dev/null || { echo "the run ended before half its deliveries were recorded" >&2; exit 1; }
  sleep 0.1
done
metrics > "$work/before.txt"
sleep 0.5
mkdir "$work/copy"
cp "$work/payhook.db-wal" "$work/copy/payhook.db-wal"
cp "$work/payhook.db" "$work/copy/payhook.db"
metrics > "$work/after.txt"
wait "$bench"
bench=
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
python3 - "$work" <<'PY'
import collections, json, re, sqlite3, struct, sys
work = sys.argv[1]
report = json.load(open(f"{work}/report.json"))
def metric(file, name):
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", open(f"{work}/{file}").read(), re.M)
    return float(m.group(1)) if m else 0.0
def moved(name):
    return metric("after.txt", name) - metric("before.txt", name)
jobs, commits = moved("payhook_commit_batch_size_sum"), moved("payhook_commit_batch_size_count")
wal = open(f"{work}/copy/payhook.db-wal", "rb").read()
# Page number to b-tree, from the copy of the file with its WAL (SQLite reads the log's complete commits).
owner = {}
for page, name, kind in sqlite3.connect(f"{work}/copy/payhook.db").execute("SELECT pageno, name, pagetype FROM dbstat"):
    owner[page] = (name, kind)
_, _, page_size, _, salt1, salt2, _, _ = struct.unpack(">8I", wal[:32])
frame = 24 + page_size
pages, commit_pages, offset = [], [], 32
while offset + frame <= len(wal):
    page, commit_size, s1, s2 = struct.unpack(">4I", wal[offset:offset + 16])
    if (s1, s2) != (salt1, salt2):
        break
    commit_pages.append(page)
    if commit_size:
        pages.append(commit_pages)
        commit_pages = []
    offset += frame
if not pages:
    sys.exit("no whole commit in the WAL's current generation: run a larger workload")
counted = collections.Counter()
for commit in pages:
    for page in commit:
        counted["database header (page 1)" if page == 1 else " ".join(owner.get(page, ("unknown", "")))] += 1
frames = sum(counted.values())
per_commit = frames / len(pages)
print(f"{report['command'].rsplit(' --seed ', 1)[0]}")
print(f"{len(pages)} commits in the WAL's current generation, {per_commit:.1f} frames ({per_commit * frame / 1024:.0f} KiB) each")
if jobs and commits:
    print(f"{jobs / commits:.1f} jobs per commit around the copy: {per_commit / (jobs / commits):.2f} frames per job")
print("| b-tree, page kind | frames per commit | share |")
print("|---|---|---|")
for name, n in counted.most_common():
    if n / frames >= 0.005:
        print(f"| {name} | {n / len(pages):.1f} | {100 * n / frames:.1f} % |")
PY
