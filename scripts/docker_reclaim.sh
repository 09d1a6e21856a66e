#!/usr/bin/env bash
# Give back the disk that earlier builds and test runs left in the Docker engine, so a long test run
# (the swarm test keeps a 2 GB engine store of the runtime image in /var/tmp, linked into five nodes) does not run
# out of it:
#   - containers, networks and /var/tmp stores (volumes, before) of swarm tests killed before their cleanup
#     (cnnvideo-swarm-*),
#   - stopped containers and dangling images (every rebuild of a changed image leaves its old one untagged).
# Tagged images and the build cache of the current images are kept. Then print the free space where the
# engine and the tests write, and warn (exit 0) when it is below CNNVIDEO_MIN_FREE_GB (default 25).
set -euo pipefail
MIN_FREE_GB=${CNNVIDEO_MIN_FREE_GB:-25}
log() { echo "docker_reclaim: $*" >&2; }

docker info >/dev/null 2>&1 || { log "error: no Docker engine answers (run scripts/docker_setup.sh)"; exit 1; }

left=$(docker ps -aq --filter name=cnnvideo-swarm-)
[ -z "$left" ] || docker rm -f -v $left >/dev/null
vols=$(docker volume ls -q --filter name=cnnvideo-swarm-)
[ -z "$vols" ] || docker volume rm $vols >/dev/null
nets=$(docker network ls -q --filter name=cnnvideo-swarm-)
[ -z "$nets" ] || docker network rm $nets >/dev/null
rm -rf /var/tmp/cnnvideo-swarm-*
docker container prune -f >/dev/null
freed=$(docker image prune -f | sed -n 's/^Total reclaimed space: //p')
log "removed stopped containers and dangling images (${freed:-0B})"

root=$(docker info -f '{{.DockerRootDir}}')
for dir in "$root" "${TMPDIR:-/tmp}" /var/tmp; do
  free_gb=$(( $(df -Pk "$dir" | awk 'NR==2 {print $4}') / 1048576 ))
  log "$dir: ${free_gb} GB free"
  if [ "$free_gb" -lt "$MIN_FREE_GB" ]; then
    log "warning: $dir has ${free_gb} GB free, under the ${MIN_FREE_GB} GB a full test run needs; free some" \
        "(docker image ls, docker system df) or the docker tests may fail with 'no space left on device'"
  fi
done
