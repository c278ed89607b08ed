#!/usr/bin/env bash
# The four ways to install payhook, followed on this machine as a user follows them (docs/install.md):
#   cargo        the README's cargo block, as written (cargo install into a temporary root)
#   deb          `cargo deb` around the release binary, then the README's .deb block as written: `sudo` and
#                `systemctl` are stand-ins here (no systemd as PID 1), which start the service exactly as its
#                installed unit says (user, environment file, umask, working directory, command line); the
#                permissions it leaves, `systemd-analyze verify` and the exposure score of the unit; remove keeps
#                the data, purge deletes it
#   image        the image built by podman around the release binary (target runtime-prebuilt), its file
#                system taken out of the image and run as the image says (user, environment, entrypoint, health
#                check) with payhook as PID 1: a delivery is accepted with nothing but what the image holds, and
#                SIGTERM stops it; the docs' chroot block as written
#   kubernetes   both overlays rendered, validated against the Kubernetes schemas (kubernetes-validate, pinned,
#                from PyPI into target/install-check-venv), their pod checked for the promised settings, and their
#                ConfigMap's configuration passing `payhook config check`; the same for a user's own overlay made
#                from `payhook init`
# The machine is left as found: the package purged (with its user), podman's storage a temporary directory.
#
#   scripts/install-check.sh [STEP…]      # default: cargo deb image kubernetes
#
# It reuses the release build (`cargo build --release -p payhook`, as scripts/instructions.sh builds it).
# PAYHOOK_CI_DIST=1 also builds the dist profile (LTO) and reports its time and size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
started=$SECONDS
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(cargo deb image kubernetes)
for step in "${steps[@]}"; do
  case $step in cargo|deb|image|kubernetes) ;; *) echo "unknown step $step (cargo, deb, image, kubernetes)" >&2; exit 2 ;; esac
done

# cargo-deb, pinned; podman from Debian when missing (as .ci/run installs valgrind).
CARGO_DEB_VERSION=3.8.0
# The Kubernetes version the manifests are validated against.
KUBERNETES_VERSION=1.32.0

work=$(mktemp -d /tmp/payhook-install-check.XXXXXX)
target=${CARGO_TARGET_DIR:-$root/target}
bin=$target/release/payhook
deb_installed=
podman_root=
mine=
cleanup() {
  local status=$?
  # Every process a step started is in its own process group, recorded here.
  for f in "$work"/*.pgid; do
    [[ -f $f ]] && kill -TERM -- "-$(cat "$f")" 2>/dev/null || true
  done
  if [[ -n $deb_installed ]] && dpkg -s payhook >/dev/null 2>&1; then
    dpkg --purge payhook >/dev/null 2>&1 || echo "install-check: could not purge the payhook package" >&2
  fi
  if [[ -n $podman_root ]]; then
    podman --root "$podman_root/storage" --runroot "$podman_root/run" system reset --force >/dev/null 2>&1 || true
  fi
  rm -rf "$work" "$root/target/image-root" ${mine:+"$mine"}
  exit "$status"
}
trap cleanup EXIT

say() { echo "install-check: $*"; }
fail() { echo "install-check: FAILED: $*" >&2; exit 1; }
timed() { # NAME COMMAND…: runs it, says how long it took
  local name=$1 t0=$SECONDS
  shift
  "$@"
  say "$name passed ($((SECONDS - t0)) s)"
}

# The fenced block after `<!-- install-check: NAME -->` in FILE, as written.
block() {
  awk -v mark="<!-- install-check: $2 -->" '
    $0 == mark { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$1"
}

# Runs the block NAME of FILE with bash -e in DIR, its background jobs ended when it is done.
run_block() {
  local file=$1 name=$2 dir=$3 script
  script=$(block "$file" "$name")
  [[ -n $script ]] || fail "no block <!-- install-check: $name --> in $file"
  # In a process group of its own, ended with whatever the block left running (a server it started with &); a
  # service the systemctl stand-in started has a session of its own and stays.
  (cd "$dir" && exec setsid timeout 300 bash -euo pipefail -c "$script") > "$work/$name.out" 2>&1 &
  local pid=$! status=0
  echo "$pid" > "$work/block.pgid"
  wait "$pid" || status=$?
  kill -TERM -- "-$pid" 2>/dev/null || true
  rm -f "$work/block.pgid"
  [[ $status -eq 0 ]] || { cat "$work/$name.out" >&2; fail "the $name block of $file (exit $status)"; }
  cat "$work/$name.out"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_healthy() { # PORT LOG
  for _ in $(seq 1 100); do
    curl -fsS -m 1 "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  cat "$2" >&2
  fail "nothing answered /healthz on port $1"
}

# ---------------------------------------------------------------------------------------------------------------
# The binary: the release build the rest of CI uses.
cargo build --release --locked --quiet -p payhook
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
"$bin" --version | grep -qx "payhook $version (commit $commit)" ||
  fail "payhook --version says '$("$bin" --version)', not 'payhook $version (commit $commit)'"
say "payhook --version: $("$bin" --version)"

# The image is built from the release binary, or from the dist one when PAYHOOK_CI_DIST=1 builds it.
image_bin=$bin
if [[ ${PAYHOOK_CI_DIST:-} == 1 ]]; then
  t0=$SECONDS
  cargo build --profile dist --locked --quiet -p payhook
  image_bin=$target/dist/payhook
  say "dist build: $((SECONDS - t0)) s, $(stat -c %s "$image_bin") bytes ($(stat -c %s "$bin") for release)"
fi

# ---------------------------------------------------------------------------------------------------------------
check_cargo() {
  port_free 8080 || fail "port 8080 is taken: the README's blocks use it"
  local dir=$work/cargo
  mkdir -p "$dir/home"
  # From the repository's root, as written; `cargo install` into a root of its own (on PATH for the block),
  # reusing this workspace's release build; ~ is a temporary home (cargo and rustup keep theirs).
  CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup} HOME=$dir/home \
    CARGO_INSTALL_ROOT=$dir/root PATH=$dir/root/bin:$PATH run_block README.md cargo "$root" > "$work/cargo.log"
  grep -q '"status":"processed"' "$work/cargo.log" || { cat "$work/cargo.log" >&2; fail "no delivery processed"; }
  say "cargo: $(grep '"status":"processed"' "$work/cargo.log" | tail -1)"
  [[ $(stat -c %a "$dir/home/payhook/payhook.env") == 600 ]] || fail "payhook init's payhook.env is not mode 0600"
  ! grep -q PAYHOOK_API_TOKEN= "$dir/home/payhook/payhook.toml" || fail "payhook.toml holds the token"
}

# ---------------------------------------------------------------------------------------------------------------
# Stand-ins for `sudo` and `systemctl` where systemd is not PID 1: the service starts as its installed unit says.
write_shims() {
  local shims=$1
  mkdir -p "$shims"
  printf '#!/bin/sh\nexec "$@"\n' > "$shims/sudo"
  cat > "$shims/systemctl" <<SHIM
#!/usr/bin/env bash
# systemctl start|restart|stop payhook, as systemd would run payhook.service.
set -euo pipefail
work=$work
SHIM
  cat >> "$shims/systemctl" <<'SHIM'
unit=$(dpkg -L payhook | grep '/payhook\.service$')
key() { sed -n "s/^$1=//p" "$unit" | tail -1; }
stop() {
  if [[ -f $work/service.pgid ]]; then
    kill -TERM -- "-$(cat "$work/service.pgid")" 2>/dev/null || true
    for _ in $(seq 1 "$(key TimeoutStopSec)0"); do
      kill -0 -- "-$(cat "$work/service.pgid")" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$work/service.pgid"
  fi
}
start() {
  local user env_file exec_start umask_value dir limit
  user=$(key User) env_file=$(key EnvironmentFile) exec_start=$(key ExecStart) umask_value=$(key UMask)
  dir=$(key WorkingDirectory) limit=$(key LimitNOFILE)
  local -a env_args=() cmd=()
  while IFS= read -r line; do
    case $line in ''|'#'*|';'*) continue ;; esac
    env_args+=("$line")
  done < "$env_file"
  read -ra cmd <<< "$exec_start"
  mkdir -p "/var/lib/$(key StateDirectory)"
  chown "$user:$user" "/var/lib/$(key StateDirectory)"
  (
    cd "$dir"
    umask "$umask_value"
    ulimit -n "$limit"
    exec setsid env -i "${env_args[@]}" setpriv --reuid="$user" --regid="$user" --init-groups --no-new-privs \
      "${cmd[@]}" >> "$work/service.log" 2>&1 < /dev/null
  ) &
  echo $! > "$work/service.pgid"
  for _ in $(seq 1 100); do
    grep -q 'payhook is listening' "$work/service.log" 2>/dev/null && return 0
    kill -0 "$(cat "$work/service.pgid")" 2>/dev/null || { cat "$work/service.log" >&2; exit 1; }
    sleep 0.1
  done
  cat "$work/service.log" >&2
  exit 1
}
# Anything else (deb-systemd-helper's `preset`, `is-enabled`, …) goes to the real systemctl, which works offline.
if [[ $# -eq 2 && ( $2 == payhook || $2 == payhook.service ) ]]; then
  case $1 in
    start) start; exit ;;
    restart) stop; start; exit ;;
    stop) stop; exit ;;
    reload) kill -HUP "$(cat "$work/service.pgid")"; exit ;;
  esac
fi
exec /usr/bin/systemctl "$@"
SHIM
  chmod 755 "$shims/sudo" "$shims/systemctl"
}

check_deb() {
  port_free 8080 || fail "port 8080 is taken: the installed configuration listens on it"
  command -v cargo-deb >/dev/null || cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
  if dpkg -s payhook >/dev/null 2>&1; then
    say "a payhook package is installed (left by an earlier run?): purging it first"
    dpkg --purge payhook >/dev/null
  fi
  local deb
  deb=$(cargo deb -p payhook --no-build --strip --locked --fast --output "$work/deb/" 2>"$work/cargo-deb.log" | tail -1) ||
    { cat "$work/cargo-deb.log" >&2; fail "cargo deb"; }
  say "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"
  dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/payhook/payhook.toml ||
    fail "/etc/payhook/payhook.toml is not a conffile"
  # The README's block names the file cargo deb writes by default: put it there.
  mkdir -p "$root/target/debian" && cp "$deb" "$root/target/debian/"

  deb_installed=1
  # Run as written, with cargo-deb's package already made from the release build (--no-build): the block's own
  # `cargo install cargo-deb` and `cargo deb` lines are skipped.
  local readme_block
  readme_block=$(block README.md deb | grep -v '^cargo ')
  printf '<!-- install-check: deb -->\n```sh\n%s\n```\n' "$readme_block" > "$work/deb-block.md"
  run_block "$work/deb-block.md" deb "$root" > "$work/deb.log"
  grep -q ' 200 OK ' "$work/deb.log" || { cat "$work/deb.log" >&2; fail "no delivery accepted"; }
  say "deb: $(grep ' 200 OK ' "$work/deb.log" | tail -1)"

  # What the package left, and how the service ran.
  ! readelf -S /usr/bin/payhook | grep -Eq '\.debug_(info|line)' || fail "/usr/bin/payhook carries debug sections: not stripped"
  getent passwd payhook >/dev/null || fail "no payhook user"
  [[ $(stat -c '%U:%G %a' /etc/payhook) == 'root:payhook 750' ]] || fail "/etc/payhook is $(stat -c '%U:%G %a' /etc/payhook)"
  for f in /etc/payhook/payhook.toml /etc/payhook/payhook.env; do
    [[ $(stat -c '%U:%G %a' "$f") == 'root:payhook 640' ]] || fail "$f is $(stat -c '%U:%G %a' "$f")"
  done
  local token
  token=$(sed -n 's/^PAYHOOK_API_TOKEN=//p' /etc/payhook/payhook.env)
  [[ ${#token} -ge 24 ]] || fail "the generated API token is ${#token} characters"
  [[ $(stat -c '%U %a' /var/lib/payhook) == 'payhook 700' ]] || fail "/var/lib/payhook is $(stat -c '%U %a' /var/lib/payhook)"
  local db=/var/lib/payhook/payhook.db
  [[ -f $db ]] || fail "$db was not created"
  [[ $(stat -c %U "$db") == payhook ]] || fail "$db is owned by $(stat -c %U "$db")"
  (( (8#$(stat -c %a "$db") & 8#077) == 0 )) || fail "$db is mode $(stat -c %a "$db"): readable by others"
  local pid
  pid=$(pgrep -g "$(cat "$work/service.pgid")" -x payhook) || fail "the service is not running"
  [[ $(ps -o user= -p "$pid") == payhook ]] || fail "the service runs as $(ps -o user= -p "$pid")"
  grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$pid/status" || fail "the service may gain privileges"
  curl -fsS -H "Authorization: Bearer $token" http://127.0.0.1:8080/metrics |
    grep -qx "payhook_build_info{version=\"$version\",commit=\"$commit\"} 1" || fail "no payhook_build_info on /metrics"
  # SIGTERM, as systemctl stop sends it: payhook exits 0 within TimeoutStopSec.
  "$work/shims/systemctl" stop payhook
  pgrep -x payhook -u payhook >/dev/null && fail "payhook still runs after stop"
  grep -q 'stopped' "$work/service.log" || { cat "$work/service.log" >&2; fail "payhook did not stop cleanly"; }

  # The unit: as systemd reads it, and how exposed it is.
  local unit
  unit=$(dpkg -L payhook | grep '/payhook\.service$')
  systemd-analyze verify "$unit" 2>&1 | tee "$work/verify.log"
  [[ ! -s $work/verify.log ]] || fail "systemd-analyze verify $unit"
  local exposure
  exposure=$(systemd-analyze security --offline=yes "$unit" 2>&1 | sed -n 's/.*Overall exposure level for payhook.service: \([0-9.]*\).*/\1/p')
  [[ -n $exposure ]] || fail "no exposure score for $unit"
  awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "exposure $exposure is above 2.0"
  say "payhook.service exposure: $exposure (systemd-analyze security --offline=yes)"

  # Installing again (an upgrade to the same version) keeps the token.
  dpkg -i "$deb" >/dev/null
  [[ $(sed -n 's/^PAYHOOK_API_TOKEN=//p' /etc/payhook/payhook.env) == "$token" ]] || fail "reinstalling changed the token"
  # Remove: the binary goes, the configuration, the token, the data and the user stay.
  dpkg -r payhook >/dev/null
  [[ ! -e /usr/bin/payhook ]] || fail "dpkg -r left /usr/bin/payhook"
  for f in /etc/payhook/payhook.toml /etc/payhook/payhook.env "$db"; do
    [[ -e $f ]] || fail "dpkg -r deleted $f"
  done
  getent passwd payhook >/dev/null || fail "dpkg -r deleted the payhook user"
  # Purge: says what it deletes, and deletes it.
  dpkg --purge payhook > "$work/purge.log" 2>&1
  grep -q '/etc/payhook' "$work/purge.log" && grep -q '/var/lib/payhook' "$work/purge.log" ||
    { cat "$work/purge.log" >&2; fail "purge did not say what it deletes"; }
  [[ ! -e /etc/payhook && ! -e /var/lib/payhook ]] || fail "purge left /etc/payhook or /var/lib/payhook"
  ! getent passwd payhook >/dev/null && ! getent group payhook >/dev/null || fail "purge left the payhook user or group"
  ! dpkg-statoverride --list | grep -q /etc/payhook || fail "purge left a dpkg-statoverride"
  deb_installed=
}

# ---------------------------------------------------------------------------------------------------------------
check_image() {
  command -v podman >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >/dev/null; }
  podman_root=$work/podman
  local podman=(podman --root "$podman_root/storage" --runroot "$podman_root/run")
  # The runtime stage, from this machine's release binary (Debian bookworm, as the builder stage).
  scripts/image-root.sh "$image_bin" "$root/target/image-root"
  "${podman[@]}" build --quiet --format docker --target runtime-prebuilt -t payhook:check . \
    > "$work/podman-build.log" 2>&1 || { cat "$work/podman-build.log" >&2; fail "podman build"; }
  "${podman[@]}" image inspect payhook:check > "$work/image.json"
  local size
  size=$("${podman[@]}" image inspect --format '{{.Size}}' payhook:check)
  say "image: $size bytes (podman image inspect --format '{{.Size}}'), from $image_bin ($(stat -c %s "$image_bin") bytes)"
  local rootfs=$work/rootfs mnt
  mnt=$("${podman[@]}" image mount payhook:check)
  cp -a "$mnt" "$rootfs"
  "${podman[@]}" image unmount payhook:check >/dev/null

  # What the image says about running it: its environment, its command, its health check, one item a line.
  python3 - "$work/image.json" "$work/image" <<'PY'
import json, sys
image = json.load(open(sys.argv[1]))[0]
config, health = image["Config"], image["Healthcheck"]
assert config["User"] == "65532:65532", config["User"]
assert health["Test"][0] == "CMD", health
assert "/var/lib/payhook" in config["Volumes"], config["Volumes"]
assert config["StopSignal"] == "SIGTERM", config.get("StopSignal")
for name, items in (("env", config["Env"]), ("command", config["Entrypoint"] + config["Cmd"]),
                    ("health", health["Test"][1:])):
    with open(f"{sys.argv[2]}.{name}", "w") as out:
        out.write("".join(item + "\n" for item in items))
PY
  local -a image_env=() command=() health=()
  mapfile -t image_env < "$work/image.env"
  mapfile -t command < "$work/image.command"
  mapfile -t health < "$work/image.health"
  [[ ! -e $rootfs/bin/sh && ! -e $rootfs/usr/bin/sh ]] || fail "the image has a shell"
  [[ $(stat -c %u "$rootfs/var/lib/payhook") == 65532 ]] || fail "/var/lib/payhook is not 65532's"

  # The configuration, as a user mounts it, and the secrets, as --env-file gives them.
  local port=18473
  port_free $port || fail "port $port is taken"
  local token=install-check-token-0123456789abcdef secret=whsec_install_check
  cat > "$rootfs/etc/payhook/payhook.toml" <<TOML
[server]
listen = "127.0.0.1:$port"
[storage]
url = "sqlite:///var/lib/payhook/payhook.db"
[[sources]]
name = "stripe"
scheme = "stripe"
format = "stripe"
secrets_env = "STRIPE_WEBHOOK_SECRET"
TOML
  local -a run_env=("${image_env[@]}" "PAYHOOK_API_TOKEN=$token" "STRIPE_WEBHOOK_SECRET=$secret")
  in_image() { env -i "${run_env[@]}" chroot --userspec=65532:65532 "$rootfs" "$@"; }
  # PID 1 of a PID namespace of its own, as in a container: the default action of SIGTERM does not apply to it.
  setsid env -i "${run_env[@]}" unshare --pid --fork --kill-child chroot --userspec=65532:65532 "$rootfs" \
    "${command[@]}" > "$work/image-serve.log" 2>&1 &
  echo $! > "$work/image.pgid"
  wait_healthy $port "$work/image-serve.log"
  local pid
  pid=$(pgrep -g "$(cat "$work/image.pgid")" -x payhook)
  [[ $(awk '/^NSpid:/ {print $NF}' "/proc/$pid/status") == 1 ]] || fail "payhook is not PID 1 of its namespace"
  in_image "${health[@]}" >/dev/null || fail "the image's health check failed against a running payhook"
  curl -fsS -X POST "http://127.0.0.1:$port/v1/orders" -H "Authorization: Bearer $token" \
    -d '{"id":"ord_image","amount":1999,"currency":"usd"}' >/dev/null
  in_image "${command[0]}" send --source stripe --order ord_image > "$work/image-send.log" 2>&1 ||
    { cat "$work/image-send.log" "$work/image-serve.log" >&2; fail "the delivery from the image was refused"; }
  grep -q '"status":"processed"' "$work/image-send.log" || { cat "$work/image-send.log" >&2; fail "not processed"; }
  curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics" |
    grep -qx "payhook_build_info{version=\"$version\",commit=\"$commit\"} 1" || fail "no payhook_build_info on /metrics"
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$pid" 2>/dev/null || fail "payhook as PID 1 did not stop on SIGTERM"
  wait "$(cat "$work/image.pgid")" || { cat "$work/image-serve.log" >&2; fail "payhook as PID 1 exited non-zero"; }
  rm -f "$work/image.pgid"
  if in_image "${health[@]}" >/dev/null 2>&1; then fail "the health check passed with payhook stopped"; fi

  # The docs' block for running the image's file system without a container runtime, as written: from the image's
  # file system in payhook-rootfs/, and payhook init's two files with the secret filled in.
  local docs=$work/docs-image
  mkdir -p "$docs"
  mnt=$("${podman[@]}" image mount payhook:check)
  cp -a "$mnt" "$docs/payhook-rootfs"
  "${podman[@]}" image unmount payhook:check >/dev/null
  (cd "$docs" && "$bin" init stripe --storage-url sqlite:///var/lib/payhook/payhook.db >/dev/null && echo 'STRIPE_WEBHOOK_SECRET=whsec_install_check' >> payhook.env)
  port_free 8080 || fail "port 8080 is taken: the docs' block uses it"
  run_block docs/install.md image-rootfs "$docs" > "$work/image-rootfs.log"
  grep -q ' 200 OK ' "$work/image-rootfs.log" || { cat "$work/image-rootfs.log" >&2; fail "no delivery accepted"; }
  say "image: $(tail -1 "$work/image-send.log"); the docs' block: $(grep ' 200 OK ' "$work/image-rootfs.log" | tail -1)"
  "${podman[@]}" system reset --force >/dev/null 2>&1
  podman_root=
}

# ---------------------------------------------------------------------------------------------------------------
check_kubernetes() {
  local requirements=scripts/install-check-requirements.txt venv=$target/install-check-venv
  if ! cmp -s "$requirements" "$venv/.requirements" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --requirement "$requirements"
    cp "$requirements" "$venv/.requirements"
  fi
  # A user's own overlay, as docs/install.md makes it: payhook init's files over the sqlite overlay.
  # Inside deploy/kubernetes, as the README's deploy/kubernetes/local (kustomize takes no absolute resource path).
  mine=$root/deploy/kubernetes/install-check-$$
  mkdir -p "$mine"
  (cd "$mine" && "$bin" init stripe --listen 0.0.0.0:8080 --storage-url sqlite:///var/lib/payhook/payhook.db >/dev/null)
  echo 'STRIPE_WEBHOOK_SECRET=whsec_install_check' >> "$mine/payhook.env"
  cat > "$mine/kustomization.yaml" <<YAML
resources:
  - ../overlays/sqlite
configMapGenerator:
  - name: payhook-config
    behavior: replace
    files:
      - payhook.toml
images:
  - name: localhost/payhook
    newName: registry.example.com/payhook
    newTag: "$version"
YAML
  # The Secret as docs/install.md makes it from payhook init's file: the token and the secret, no comment lines.
  kubectl create secret generic payhook-secrets --from-env-file="$mine/payhook.env" --dry-run=client -o json |
    python3 -c 'import json, sys; keys = sorted(json.load(sys.stdin)["data"]); assert keys == ["PAYHOOK_API_TOKEN", "STRIPE_WEBHOOK_SECRET"], keys' ||
    fail "kubectl create secret --from-env-file payhook.env"
  for overlay in deploy/kubernetes/overlays/sqlite deploy/kubernetes/overlays/postgres "$mine"; do
    local name out
    name=$(basename "$overlay")
    out=$work/k8s-$name
    mkdir -p "$out"
    kubectl kustomize "$overlay" > "$out/all.yaml" || fail "kubectl kustomize $overlay"
    "$venv/bin/kubernetes-validate" --quiet --strict -k "$KUBERNETES_VERSION" "$out/all.yaml" ||
      fail "$overlay does not validate against Kubernetes $KUBERNETES_VERSION"
    # The pod's promises, and the configuration with the variables its Secrets give (dummies).
    "$venv/bin/python" scripts/install-check-k8s.py "$out/all.yaml" "$out" "$("$bin" config print-default)" ||
      fail "$overlay"
    local -a env_args=()
    mapfile -t env_args < "$out/env"
    env -i "${env_args[@]}" "$bin" --config "$out/payhook.toml" config check > "$out/check.log" 2>&1 ||
      { cat "$out/check.log" >&2; fail "the configuration of $overlay does not pass payhook config check"; }
    say "kubernetes: $overlay renders, validates and its configuration passes config check"
  done
}

# compose.yaml: both replicas on the one database, with the image this repository builds.
check_compose() {
  python3 - compose.yaml <<'PY'
import sys
text = open(sys.argv[1]).read()
for needed in ("payhook-1:", "payhook-2:", "postgres:", "PAYHOOK_STORAGE__URL", "condition: service_healthy"):
    assert needed in text, f"compose.yaml lacks {needed}"
PY
}

# `sudo` and `systemctl` stand-ins for the blocks the docs give (this script runs as root, without systemd).
write_shims "$work/shims"
export PATH=$work/shims:$PATH
for step in "${steps[@]}"; do
  timed "$step" "check_$step"
done
[[ " ${steps[*]} " == *" image "* ]] && check_compose
say "${#steps[@]} passed, 0 failed in $((SECONDS - started)) s"
