#!/usr/bin/env bash
# payhook on PostgreSQL, in one run: group commit against one commit per event, one instance against two, and a
# pgbench reference (one transaction per event, nothing else), on the same machine, back to back.
#
#   scripts/bench-postgres.sh [ORDERS] [CONCURRENCY] [SCENARIO]
#
# PostgreSQL: $PAYHOOK_BENCH_POSTGRES_URL, else $PAYHOOK_TEST_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test
# (a role that may create schemas). Each mode gets a fresh schema, dropped at the end. The server's own settings
# are used as they are (synchronous_commit = on by default: a commit returns once its WAL is flushed).
#
# Each mode starts payhook server(s) and drives them with
# `payhook-bench bench --scenario SCENARIO … --concurrency C --verify` (steady by default: `--dup 0.2 --refund 0.1
# --shuffle`; the other scenarios' flags are in scripts/bench-lib.sh); the two-instance mode gives bench both
# URLs (`--url A,B`: deliveries alternate between the instances, C in flight in all). Prints one line per mode.
set -euo pipefail
orders=${1:-30000}
concurrency=${2:-64}
scenario=${3:-steady}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
# From the repository, so that cargo reads its .cargo/config.toml (how the bundled SQLite is compiled).
cd "$root"
mapfile -t bench_args < <(scenario_args "$scenario" "$orders" "$concurrency")
db=${PAYHOOK_BENCH_POSTGRES_URL:-${PAYHOOK_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}}
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

config() { # file port schema storage-toml
  bench_config "$1" "$2" "url = \"$db${sep}options=-csearch_path%3D$3\"
$4"
}

serve() { # config port
  "$bin" --config "$1" serve 2>>"$work/serve.log" &
  pids+=($!)
  wait_ready "$2" "$work/serve.log"
}

run_mode() { # name instances storage-toml
  local name=$1 instances=$2 storage=$3 schema="payhook_bench_${run}_${1//-/_}" urls=() first
  schemas+=("$schema")
  psql -q "$db" -c "CREATE SCHEMA $schema" >/dev/null
  local started=${#pids[@]}
  for i in $(seq "$instances"); do
    local port=$((18290 + i))
    config "$work/$name-$i.toml" "$port" "$schema" "$storage"
    serve "$work/$name-$i.toml" "$port"
    urls+=("http://127.0.0.1:$port")
  done
  first=$(IFS=,; echo "${urls[*]}")
  "$bench_bin" --config "$work/$name-1.toml" bench --url "$first" "${bench_args[@]}" --verify --json > "$work/$name.json"
  for p in "${pids[@]:$started}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  pids=("${pids[@]:0:$started}")   # gone: their ids may be another process's by the time cleanup runs
}

run_mode group-commit 1 ''
run_mode per-event 1 $'group_commit = false\npool_size = 34\nwriters = 16'
run_mode two-instances 2 ''

# References: what PostgreSQL does here with one transaction (one commit) per event and nothing else — no HTTP,
# no signatures, no JSON — from 16 pgbench clients: a bare INSERT, and an event's writes (inbox row, business key,
# guarded order update, audit row, outbox row).
pgbench_insert=
pgbench_event=
if command -v pgbench >/dev/null; then
  s="payhook_bench_${run}_pgbench"
  schemas+=("$s")
  psql -q "$db" >/dev/null <<SQL
CREATE SCHEMA $s;
CREATE TABLE $s.events (id bigint PRIMARY KEY, body text);
CREATE TABLE $s.keys (k bigint PRIMARY KEY);
CREATE TABLE $s.orders (id bigint PRIMARY KEY, status text, n int) WITH (fillfactor = 80);
INSERT INTO $s.orders SELECT i, 'pending', 0 FROM generate_series(1, 100000) i;
CREATE TABLE $s.audit (order_id bigint, ev bigint, PRIMARY KEY (order_id, ev));
CREATE TABLE $s.outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id bigint, ev bigint, payload jsonb);
SQL
  printf '%s\n' '\set id random(1, 1000000000000)' \
    "INSERT INTO $s.events VALUES (:id, 'x') ON CONFLICT DO NOTHING;" > "$work/insert.sql"
  printf '%s\n' '\set id random(1, 1000000000000)' '\set o random(1, 100000)' 'BEGIN;' \
    "INSERT INTO $s.events VALUES (:id, repeat('x', 200)) ON CONFLICT DO NOTHING;" \
    "INSERT INTO $s.keys VALUES (:id) ON CONFLICT DO NOTHING;" \
    "UPDATE $s.orders SET status = 'paid', n = n + 1 WHERE id = :o;" \
    "INSERT INTO $s.audit VALUES (:o, :id) ON CONFLICT DO NOTHING;" \
    "INSERT INTO $s.outbox (order_id, ev, payload) VALUES (:o, :id, '{\"kind\":\"order.paid\"}');" \
    'END;' > "$work/event.sql"
  tps() { pgbench -n -M prepared -c 16 -j 2 -T 10 -f "$1" "$db" 2>/dev/null | awk '/^tps/ {print int($3); exit}'; }
  pgbench_insert=$(tps "$work/insert.sql")
  pgbench_event=$(tps "$work/event.sql")
fi

python3 - "$work" "$pgbench_insert" "$pgbench_event" <<'PY'
import json, sys
work, pg_insert, pg_event = sys.argv[1:4]
rows = {m: json.load(open(f"{work}/{m}.json")) for m in ("group-commit", "per-event", "two-instances")}
print(rows["group-commit"]["command"].rsplit(" --seed ", 1)[0])
print("| mode | deliveries | acked/s | p50 ms | p99 ms | max ms | retried 5xx | violations |")
print("|---|---|---|---|---|---|---|---|")
for m, r in rows.items():
    l = r["latency_ms"]
    print(f"| {m} | {r['deliveries']} | {r['acked_per_s']:.0f} | {l['p50']:.2f} | {l['p99']:.2f} | {l['max']:.2f} "
          f"| {r['retried_5xx']} | {r['verify']['violations']} |")
rate = {m: r["acked_per_s"] for m, r in rows.items()}
print(f"group-commit / per-event: {rate['group-commit'] / rate['per-event']:.1f}x")
print(f"two-instances / group-commit: {rate['two-instances'] / rate['group-commit']:.2f}x")
if pg_insert:
    print(f"pgbench, 16 clients, one transaction per event: {pg_insert} tps (a bare INSERT), "
          f"{pg_event} tps (an event's five writes)")
PY
