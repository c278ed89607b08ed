# Shared by the bench scripts (sourced, not run).

# scenario_args SCENARIO ORDERS CONCURRENCY: the `payhook-bench bench` flags of a scenario (without --config, --url).
# sustained runs for $PAYHOOK_BENCH_DURATION_SECS (default 30) seconds, with enough orders registered ahead (30,000
# per second of the run, at least ORDERS), so that no registration competes with the deliveries while it runs.
scenario_args() {
  local scenario=$1 orders=$2 concurrency=$3
  if [[ $scenario == sustained ]]; then
    local ahead=$(( ${PAYHOOK_BENCH_DURATION_SECS:-30} * 30000 ))
    (( ahead > orders )) && orders=$ahead
  fi
  local args=(--scenario "$scenario" --source payments --orders "$orders" --concurrency "$concurrency")
  case $scenario in
    steady) args+=(--dup 0.2 --refund 0.1 --shuffle) ;;
    dup-storm) args+=(--refund 0.1 --shuffle) ;;
    refund-first) args+=(--dup 0.2) ;;
    sustained) args+=(--dup 0.2 --refund 0.1 --duration-secs "${PAYHOOK_BENCH_DURATION_SECS:-30}") ;;
    *) echo "unknown scenario $scenario (steady, dup-storm, refund-first, sustained)" >&2; return 1 ;;
  esac
  printf '%s\n' "${args[@]}"
}

# bench_config FILE PORT STORAGE [BINARY]: a server configuration with the benchmarks' one source (hmac, generic
# format). STORAGE is the body of [storage] (its url and options); it may open further tables after it
# ("[retention]…"). The load generator is one address standing in for many providers: it may hold the whole
# connection cap, where BINARY (default: the caller's $bin) knows max_connections_per_client (an older build,
# compared by bench-ab.sh or instructions.sh, does not).
bench_config() {
  local per_client="max_connections_per_client = 2048" binary=${4:-${bin:-}}
  if [[ -n $binary ]] && ! "$binary" config print-default | grep -q '^# *max_connections_per_client'; then
    per_client=""
  fi
  cat > "$1" <<TOML
[server]
listen = "127.0.0.1:$2"
$per_client
[storage]
$3
[[sources]]
name = "payments"
scheme = "hmac"
header = "X-Webhook-Signature"
format = "generic"
secrets = ["whsec_bench_secret"]
TOML
}

# wait_ready PORT LOG: waits up to 60 s for /readyz on PORT; if it never answers, prints the end of LOG and exits.
wait_ready() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.1; done
  echo "payhook on port $1 did not become ready" >&2
  tail -50 "$2" >&2
  exit 1
}

# release_binary [BINARY]: BINARY when one is given, else this checkout's release build of payhook, built first
# (from the repository root, $root, so that cargo reads its .cargo/config.toml).
release_binary() {
  if [[ -n ${1:-} ]]; then
    echo "$1"
    return
  fi
  (cd "$root" && cargo build --release --quiet --locked -p payhook >&2)
  echo "${CARGO_TARGET_DIR:-$root/target}/release/payhook"
}

# bench_binary: the load generator, `payhook-bench` (its `bench` and `prefill`): $PAYHOOK_BENCH_BIN when set, else
# this checkout's release build, built first. It drives any payhook server, an older build too (one from before the
# load generator left the payhook binary, where it was `payhook bench`).
bench_binary() {
  if [[ -n ${PAYHOOK_BENCH_BIN:-} ]]; then
    echo "$PAYHOOK_BENCH_BIN"
    return
  fi
  (cd "$root" && cargo build --release --quiet --locked -p payhook-bench >&2)
  echo "${CARGO_TARGET_DIR:-$root/target}/release/payhook-bench"
}
