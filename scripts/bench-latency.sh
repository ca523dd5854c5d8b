#!/usr/bin/env bash
# Latency and throughput from the three clients against one release daemon on a temp socket.
#   scripts/bench-latency.sh [N]      (N calls per measurement, default 10000; `make bench`)
# Needs: the release daemon (cargo build --release -p recalld), the built-in model
# ($RECALLD_MODEL_DIR, default models/all-MiniLM-L6-v2), the Python client in .venv
# (make py-client) and the TypeScript client built (make ts-client).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-10000}"
export RECALLD_MODEL_DIR="${RECALLD_MODEL_DIR:-$REPO/models/all-MiniLM-L6-v2}"
BIN="$REPO/target/release/recalld"
cargo build --release -p recalld --example latency --quiet
TMP="$(mktemp -d)"
SOCK="$TMP/recalld.sock"
RECALLD_LOG=warn "$BIN" serve --socket "$SOCK" --data "$TMP/data" >"$TMP/daemon.log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
for _ in $(seq 300); do [ -S "$SOCK" ] && break; kill -0 "$PID" || { cat "$TMP/daemon.log"; exit 1; }; sleep 0.1; done
[ -S "$SOCK" ] || { echo "daemon did not listen on $SOCK" >&2; cat "$TMP/daemon.log"; exit 1; }
echo "# rust ($N calls)"
"$REPO/target/release/examples/latency" --socket "$SOCK" -n "$N"
echo "# python ($N calls)"
if [ -x "$REPO/.venv/bin/python" ]; then
  "$REPO/.venv/bin/python" "$REPO/client-py/bench/latency.py" --socket "$SOCK" -n "$N"
else echo "skipped: no .venv (make py-client)"; fi
echo "# typescript ($N calls)"
if [ -f "$REPO/client-ts/dist/src/index.js" ]; then
  (cd "$REPO/client-ts" && node bench/latency.mjs --socket "$SOCK" --n "$N")
else echo "skipped: client-ts not built (make ts-client)"; fi
