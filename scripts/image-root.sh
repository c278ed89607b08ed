#!/usr/bin/env bash
# Lays out the files of payhook's container image that come from its binary, in DIR:
#   DIR/rootfs/usr/bin/payhook   the binary
#   DIR/rootfs/lib…/…            every shared library ldd lists for it (the C library, its loader, libgcc_s), at
#                                the path the binary looks for it, so that the image needs no distribution under it
#   DIR/rootfs/etc/ssl/certs/…   the machine's CA bundle, for a NATS sink over TLS (payhook's other TLS clients
#                                carry their roots compiled in)
#   DIR/rootfs/tmp/              an empty /tmp (mode 1777): SQLite will not open a database without a directory
#                                for its temporary files
#   DIR/data/                    the empty data directory (the image's volume, given to 65532)
# The Containerfile's builder stage runs it on the binary it builds; scripts/install-check.sh runs it on a binary
# built on this machine for the image's target runtime-prebuilt. Both give the runtime stage the same tree.
#
#   scripts/image-root.sh BINARY DIR
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BINARY DIR" >&2; exit 2; }
bin=$1 root=$2
[[ -x $bin ]] || { echo "$bin: not an executable file" >&2; exit 1; }
rm -rf "$root"
mkdir -p "$root/rootfs/usr/bin" "$root/rootfs/var/lib" "$root/rootfs/tmp" "$root/data"
chmod 1777 "$root/rootfs/tmp"
install -m 0755 "$bin" "$root/rootfs/usr/bin/payhook"
# A static binary has no libraries to carry: ldd says "not a dynamic executable" and fails.
if libs=$(ldd "$bin" 2>/dev/null); then
  # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" and the loader's "/lib64/ld-linux-x86-64.so.2 (0x…)".
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$libs" | sort -u | while read -r lib; do
    mkdir -p "$root/rootfs$(dirname "$lib")"
    cp -L "$lib" "$root/rootfs$lib"
  done
fi
bundle=/etc/ssl/certs/ca-certificates.crt
if [[ -f $bundle ]]; then
  mkdir -p "$root/rootfs/etc/ssl/certs"
  cp -L "$bundle" "$root/rootfs$bundle"
fi
