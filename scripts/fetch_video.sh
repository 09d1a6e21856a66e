#!/usr/bin/env bash
# Fetch the sample static-camera video (vtest.avi, 768x576 pedestrians) from Debian/Ubuntu's opencv-doc package
# into DIR (default media/), with the package's second clip, megamind.avi (720x528, an animated trailer: another
# scene, for a second camera). Needs only apt-get download (no root).
set -euo pipefail
dest=${1:-media}
mkdir -p "$dest"
[ -s "$dest/vtest.avi" ] && [ -s "$dest/megamind.avi" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && apt-get download opencv-doc >/dev/null ) || {
  echo "fetch_video: 'apt-get download opencv-doc' failed (run 'sudo apt-get update' first?)" >&2; exit 1; }
dpkg-deb -x "$tmp"/opencv-doc_*.deb "$tmp/x"
for pair in vtest.avi:vtest.avi Megamind.avi:megamind.avi; do
  src=$(find "$tmp/x" -name "${pair%%:*}" | head -1)
  [ -n "$src" ] || { echo "fetch_video: ${pair%%:*} not found in opencv-doc" >&2; exit 1; }
  cp "$src" "$dest/${pair##*:}"
  echo "fetched $dest/${pair##*:}"
done
