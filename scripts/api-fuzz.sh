#!/usr/bin/env bash
# A schema-driven property test of the HTTP API: schemathesis generates requests from payhook's own OpenAPI
# document (/openapi.json), valid and invalid ones, sends them to a live `payhook serve` on a fresh SQLite file, and
# checks every answer against the document: no 5xx, only documented statuses, documented content types, bodies
# that match their schemas, valid requests accepted and invalid ones refused.
#
#   scripts/api-fuzz.sh [EXAMPLES]      # EXAMPLES per operation and phase (default 100)
#
# schemathesis is pinned with its dependencies and installed into target/api-fuzz-venv from PyPI on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

examples="${1:-${PAYHOOK_API_FUZZ_EXAMPLES:-100}}"
# Every package pinned (scripts/api-fuzz-requirements.txt, from `pip freeze`), so the run is the same everywhere.
requirements="scripts/api-fuzz-requirements.txt"
venv="target/api-fuzz-venv"
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --requirement "$requirements"
  cp "$requirements" "$stamp"
fi

cargo build --locked --quiet -p payhook --bin payhook
bin="${CARGO_TARGET_DIR:-target}/debug/payhook"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
token="api-fuzz-token-0123456789abcdef"
cat > "$work/payhook.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
api_token = "$token"
# The generated requests include missing and wrong tokens on purpose, hundreds of them from one address: with the
# default throttle every later request would be answered 429, and the handlers behind it would go untested.
auth_failures_per_minute = 1000000
auth_failure_burst = 1000000

[storage]
url = "sqlite://$work/payhook.db"

[[sources]]
name = "payments"
scheme = "hmac"
header = "X-Webhook-Signature"
algorithm = "sha256"
encoding = "hex"
format = "generic"
secrets = ["api-fuzz-secret"]
TOML

"$bin" --config "$work/payhook.toml" serve > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { cat "$work/server.log" >&2; exit 1; }

status=0
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --max-examples "$examples" \
  --seed "${PAYHOOK_API_FUZZ_SEED:-1}" \
  --generation-deterministic \
  --workers 1 \
  --no-color \
  --report junit --report-dir "$work/report" \
  || status=$?
if [ "$status" -ne 0 ]; then
  echo "the API does not match its OpenAPI document (schemathesis exited $status); server log:" >&2
  tail -50 "$work/server.log" >&2
fi
exit "$status"
