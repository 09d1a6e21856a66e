#!/usr/bin/env bash
# Fetch real photos (dog, eagle, giraffe, horses, kite, person, scream .jpg) from Debian/Ubuntu's darknet
# package into DIR (default media/photos/). Needs only apt-get download and dpkg-deb (no root). The tests
# with trained weights build a static-camera clip from dog.jpg. Idempotent.
set -euo pipefail
dest=${1:-media/photos}
mkdir -p "$dest"
[ -s "$dest/dog.jpg" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && apt-get download darknet >/dev/null 2>&1 ) || {
  echo "fetch_photos: 'apt-get download darknet' failed (run 'sudo apt-get update' first?)" >&2; exit 1; }
dpkg-deb -x "$tmp"/darknet_*.deb "$tmp/x"
src=$tmp/x/usr/share/darknet/data
[ -s "$src/dog.jpg" ] || { echo "fetch_photos: dog.jpg not found in the darknet package" >&2; exit 1; }
cp "$src"/*.jpg "$dest/"
echo "fetched $(ls "$src"/*.jpg | wc -l) photos into $dest"
