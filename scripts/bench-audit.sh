#!/usr/bin/env bash
# The cost of the audit trail to a bulk replay: two builds of payhook, each on a fresh SQLite file, receive the same N
# dead letters (signed bodies the format cannot read), then replay them all in one `POST /v1/dead-letters/replay`
# (unpaced: replay.per_second high, replay.max_per_call = N). Reports each build's wall time for the replay and the
# server's CPU time over it (/proc/PID/stat), B over A. Rounds alternate A and B ($PAYHOOK_BENCH_ROUNDS, default 3);
# the ratios are of the medians.
#
#   scripts/bench-audit.sh BINARY_A BINARY_B [N]      (default N = 10000)
set -euo pipefail
a=$(realpath "$1") b=$(realpath "$2")
n=${3:-10000}
rounds=${PAYHOOK_BENCH_ROUNDS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bench-lib.sh"
work=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export PAYHOOK_API_TOKEN=bench-token-0123456789abcdef

run() { # BINARY TAG ROUND: prints "TAG WALL_SECONDS CPU_SECONDS REPLAYED"
  local binary=$1 tag=$2 dir="$work/$2-$3" port
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  bench_config "$dir/payhook.toml" "$port" "url = \"sqlite://$dir/payhook.db\"" "$binary"
  cat >> "$dir/payhook.toml" <<TOML
[replay]
max_per_call = $n
per_second = 1000000
[retention]
enabled = false
TOML
  sed -i "s/^listen = .*/&\nrequest_timeout_ms = 3600000/" "$dir/payhook.toml"
  "$binary" --config "$dir/payhook.toml" serve 2>"$dir/serve.log" &
  pid=$!
  wait_ready "$port" "$dir/serve.log"
  python3 - "$port" "$n" "$pid" "$tag" <<'PY'
import hashlib, hmac, http.client, json, os, sys, time
port, n, pid, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
conn = http.client.HTTPConnection("127.0.0.1", port)
for i in range(n):
    body = f"dead letter {i}".encode()
    sig = hmac.new(b"whsec_bench_secret", body, hashlib.sha256).hexdigest()
    conn.request("POST", "/webhooks/payments", body, {"X-Webhook-Signature": sig, "Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    assert r.status == 200, (r.status, i)
def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
token = os.environ["PAYHOOK_API_TOKEN"]
cpu0, t0 = cpu(), time.monotonic()
conn.request("POST", "/v1/dead-letters/replay", "{}", {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
r = conn.getresponse(); report = json.loads(r.read())
wall, cpu1 = time.monotonic() - t0, cpu()
assert r.status == 200 and report["matched"] == n, report
print(tag, f"{wall:.3f}", f"{cpu1 - cpu0:.3f}", report["matched"])
PY
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
}

results="$work/results"
for round in $(seq "$rounds"); do
  run "$a" A "$round" | tee -a "$results"
  run "$b" B "$round" | tee -a "$results"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda tag, i: statistics.median(float(r[i]) for r in rows if r[0] == tag)
for name, i in (("replay wall time", 1), ("server CPU during the replay", 2)):
    print(f"{name}: A {med('A', i):.3f} s, B {med('B', i):.3f} s, B/A {med('B', i) / med('A', i):.3f}")
PY
