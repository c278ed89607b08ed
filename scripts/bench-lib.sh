# Shared by the bench scripts (sourced, not run).

# scenario_args SCENARIO ORDERS CONCURRENCY: the `payhook bench` flags of a scenario (without --config, --url).
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
