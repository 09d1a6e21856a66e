#!/usr/bin/env bash
# Deploy docker-stack.yml from a swarm manager after checking what would otherwise leave a service
# pending forever or failing on one device:
#   - every placed role of the stack (trainer, master; with several cameras master-<camera> each; the
#     listed workers worker<i> of a one-camera stack scripts/compose_workers.py rendered) has exactly one node
#     labelled cnnvideo.role=ROLE, and no node has an unknown role;
#   - a stack with the joining `worker` service has at least WORKERS (default 2) nodes labelled
#     cnnvideo.worker=true (one worker per device), and JOIN_TOKEN is set (16+ characters);
#   - IMAGE (and NETEM_IMAGE), when they name a registry, answer there and have a variant for the
#     architecture of every node that runs them (one multi-arch tag: scripts/build_multiarch.sh);
#   - MASTER_IP (the workers' and the shaping helper's address of the master; MASTER_<CAMERA>_IP of
#     master-<camera>) defaults to that master's node's address.
# Then `docker stack deploy`; the cluster config becomes a swarm config named after its content, so
# a changed file (or rate: HOP1_RATE=1 ...) is one more run of this script, in place.
#   scripts/swarm_deploy.sh [--stack NAME] [--check-only]
# Environment: IMAGE (default cnnvideo/node), NETEM_IMAGE (cnnvideo/netem), PI_CONFIG (a file in
# configs/, default swarm.yml), JOIN_TOKEN, WORKERS, WORKER_CPUS, MASTER_IP, FRAMES, HOP_*/RET_* (see docker-stack.yml).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK_FILE=${STACK_FILE:-$REPO/docker-stack.yml}
STACK=cnnvideo
CHECK_ONLY=0
export IMAGE=${IMAGE:-cnnvideo/node} NETEM_IMAGE=${NETEM_IMAGE:-cnnvideo/netem} PI_CONFIG=${PI_CONFIG:-swarm.yml}
export WORKERS=${WORKERS:-2}

log() { echo "swarm_deploy: $*" >&2; }
die() { log "error: $*"; exit 1; }

registry_of() {
  # the registry host of an image reference, or nothing for a local / default-registry name
  local first=${1%%/*}
  [[ $1 == */* ]] && [[ $first == *[.:]* || $first == localhost ]] && echo "$first"
  return 0
}

nodes_json() { docker node inspect $(docker node ls -q); }

check_roles() {
  # prints "ROLE NODE ARCH ADDR" for every role of the stack file (and "worker NODE ARCH ADDR" for every
  # worker-labelled node when the stack places joining workers); dies on a missing/duplicate/unknown role
  local roles need=0
  roles=$(grep -o 'node\.labels\.cnnvideo\.role == [A-Za-z0-9_-]*' "$STACK_FILE" | awk '{print $3}' | sort -u | tr '\n' ' ')
  grep -q 'node\.labels\.cnnvideo\.worker == true' "$STACK_FILE" && need=$WORKERS
  nodes_json | python3 -c '
import json, sys
roles, need = sys.argv[1].split(), int(sys.argv[2])
workers = []
arch = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "armv7l": "linux/arm/v7", "armv6l": "linux/arm/v6"}
by_role, unlabelled, problems = {}, [], []
for n in json.load(sys.stdin):
    name = n["Description"]["Hostname"]
    labels = n["Spec"].get("Labels") or {}
    role = labels.get("cnnvideo.role")
    platform = arch.get(n["Description"]["Platform"]["Architecture"], n["Description"]["Platform"]["Architecture"])
    if need and labels.get("cnnvideo.worker") == "true":
        workers.append((name, platform, n["Status"].get("Addr", "")))
    if role is None:
        unlabelled.append(name)
    elif role not in roles:
        problems.append("node %s has cnnvideo.role=%s, which is not a role of the stack (%s): "
                        "docker node update --label-rm cnnvideo.role %s" % (name, role, ", ".join(roles), name))
    else:
        by_role.setdefault(role, []).append((name, platform, n["Status"].get("Addr", "")))
for role in roles:
    found = by_role.get(role, [])
    if not found:
        problems.append("no node is labelled cnnvideo.role=%s: docker node update --label-add cnnvideo.role=%s NODE"
                        " (unlabelled nodes: %s)" % (role, role, ", ".join(unlabelled) or "none"))
    elif len(found) > 1:
        problems.append("%d nodes are labelled cnnvideo.role=%s (%s): keep one (docker node update --label-rm "
                        "cnnvideo.role NODE)" % (len(found), role, ", ".join(f[0] for f in found)))
if len(workers) < need:
    spare = [n for n in unlabelled if n not in [w[0] for w in workers]]
    problems.append("%d node(s) are labelled cnnvideo.worker=true (%s) but WORKERS=%d workers need one each: "
                    "docker node update --label-add cnnvideo.worker=true NODE (unlabelled nodes: %s), or deploy "
                    "with fewer WORKERS" % (len(workers), ", ".join(w[0] for w in workers) or "none", need,
                                            ", ".join(spare) or "none"))
for name in unlabelled:
    if name not in [w[0] for w in workers]:
        sys.stderr.write("swarm_deploy: node %s has no cnnvideo.role label: it runs only the shaping helper\n" % name)
if problems:
    sys.stderr.write("".join("swarm_deploy: error: %s\n" % p for p in problems))
    sys.exit(1)
for role in roles:
    print(role, *by_role[role][0])
for worker in workers:
    print("worker", *worker)
' "$roles" "$need"
}

check_token() {
  # a stack whose roles read a join pool's config needs the one token every role gets (docker-stack.yml)
  grep -q 'JOIN_TOKEN' "$STACK_FILE" || return 0
  [ -n "${JOIN_TOKEN:-}" ] \
    || die "JOIN_TOKEN is not set: export JOIN_TOKEN=\$(openssl rand -hex 16) (one secret for the whole stack; workers present it to join)"
  [ "${#JOIN_TOKEN}" -ge 16 ] || die "JOIN_TOKEN has ${#JOIN_TOKEN} characters: give it at least 16 (openssl rand -hex 16)"
}

image_platforms() {
  # platforms (linux/arm64 ...) of a registry image; dies with what to do when the registry is down
  local ref=$1 reg
  reg=$(registry_of "$ref")
  curl -fsS -m 5 -o /dev/null "http://$reg/v2/" 2>/dev/null || curl -ksS -m 5 -o /dev/null "https://$reg/v2/" 2>/dev/null \
    || die "registry $reg does not answer (http://$reg/v2/): start it (scripts/build_multiarch.sh starts a local one), or push $ref to a registry every node reaches"
  docker manifest inspect --insecure -v "$ref" 2>/dev/null | python3 -c '
import json, sys
data = json.load(sys.stdin)
for m in data if isinstance(data, list) else [data]:
    p = m["Descriptor"].get("platform") or {}
    print("/".join(x for x in (p.get("os", "linux"), p.get("architecture", "?"), p.get("variant")) if x))
' || die "$ref is not in registry $reg: build and push it (scripts/build_multiarch.sh --registry $reg)"
}

check_arch() {
  # check_arch IMAGE "ROLE NODE ARCH ADDR" lines: every node's architecture is in the image
  local ref=$1 lines=$2 platforms role node arch addr
  if [ -z "$(registry_of "$ref")" ]; then
    log "$ref names no registry: every node must have it loaded (docker load); architectures not checked"
    return 0
  fi
  platforms=$(image_platforms "$ref" | tr '\n' ' ')
  while read -r role node arch addr; do
    [[ " $platforms" == *" $arch "* ]] \
      || die "node $node ($role) is $arch but $ref has only: ${platforms% }; build and push $arch (scripts/build_multiarch.sh --arch amd64,arm64), or label a $(echo "$platforms" | awk '{print $1}') node cnnvideo.role=$role"
  done <<<"$lines"
  log "$ref has ${platforms% }: fits every node"
}

main() {
  while [ $# -gt 0 ]; do
    case $1 in
      --stack) STACK=${2:?}; shift ;;
      --check-only) CHECK_ONLY=1 ;;
      *) die "unknown option $1 (usage: $0 [--stack NAME] [--check-only])" ;;
    esac
    shift
  done
  [ "$(docker info -f '{{.Swarm.ControlAvailable}}' 2>/dev/null)" = true ] \
    || die "this engine is not a swarm manager: run docker swarm init here (other devices: docker swarm join), or run this on a manager"
  [ -f "$REPO/configs/$PI_CONFIG" ] || die "no cluster config configs/$PI_CONFIG (PI_CONFIG names a file in configs/)"
  [[ $WORKERS =~ ^[1-9][0-9]*$ ]] || die "WORKERS must be a whole number >= 1 (the workers the master waits for), got '$WORKERS'"
  check_token
  local placed
  placed=$(check_roles) || exit 1
  check_arch "$IMAGE" "$placed"
  check_arch "$NETEM_IMAGE" "$(docker node inspect -f '{{.Description.Hostname}} {{.Description.Hostname}} {{.Description.Platform.Architecture}} -' $(docker node ls -q) \
    | sed 's,x86_64,linux/amd64,; s,aarch64,linux/arm64,; s,armv7l,linux/arm/v7,')"
  # each master's address for the workers' --join and the shaping helper (a master has no server, so the config
  # lacks it): master -> MASTER_IP, master-<camera> -> MASTER_<CAMERA>_IP (scripts/compose_workers.py master_ip_var),
  # from its node
  local role node arch addr var masters=""
  while read -r role node arch addr; do
    [[ $role == master* ]] || continue
    var=$(tr 'a-z-' 'A-Z_' <<<"$role")_IP
    export "$var=${!var:-$addr}"
    masters+="$role=${!var} "
  done <<<"$placed"
  export CONFIG_VERSION
  CONFIG_VERSION=$(sha256sum "$REPO/configs/$PI_CONFIG" | cut -c1-12)
  log "roles: $(awk '{printf "%s=%s(%s) ", $1, $2, $4}' <<<"$placed")master addresses ${masters% }; WORKERS=$WORKERS"
  [ "$CHECK_ONLY" = 1 ] && return 0
  local resolve=never
  [ -n "$(registry_of "$IMAGE")" ] && resolve=always
  (cd "$REPO" && docker stack deploy -c "$STACK_FILE" --resolve-image "$resolve" --prune "$STACK")
}

main "$@"
