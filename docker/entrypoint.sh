#!/bin/sh
# Image entry point: `cnnvideo ARGS`. Started as root (the master image), it first makes the
# output folder writable and then runs as the folder's owner, or as `cnnvideo` if root owns it,
# so files in a bind-mounted ./out belong to whoever created ./out. Never runs the role as root.
set -eu
if [ "$(id -u)" != 0 ]; then exec cnnvideo "$@"; fi
out=${CNNVIDEO_OUT:-/app/out}
mkdir -p "$out"
uid=$(stat -c %u "$out")
gid=$(stat -c %g "$out")
if [ "$uid" = 0 ]; then
  chown cnnvideo:cnnvideo "$out"
  uid=$(id -u cnnvideo)
  gid=$(id -g cnnvideo)
fi
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all -- cnnvideo "$@"
