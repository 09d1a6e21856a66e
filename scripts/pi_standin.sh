#!/usr/bin/env bash
# Test the code the 32-bit Pi image runs under the closest stand-in that can be had here:
# Debian bullseye, Python 3.9, torch 1.7.1 / torchvision 0.8.2 from PyPI (no torch.fx).
#   1. make the base image cnnvideo/debian:bullseye with debootstrap if it is missing (root),
#   2. build docker/pi-standin.Dockerfile as cnnvideo/pi-standin (context streamed as a tar:
#      sources, tests and the host's CA bundle for HTTPS to PyPI inside the build),
#   3. run the unit tests that make sense without torch.fx inside it (pytest ARGS override them),
#   4. with --local, also run `cnnvideo local --frames 5` (alexnet, tiny synthetic video) inside.
# Usage: scripts/pi_standin.sh [--build-only] [--local] [-- PYTEST ARGS]
# Environment: CNNVIDEO_STANDIN_BASE (default cnnvideo/debian:bullseye), CNNVIDEO_STANDIN_IMAGE
# (default cnnvideo/pi-standin), CNNVIDEO_DEBIAN_MIRROR (default: the host's apt sources),
# CNNVIDEO_CA_BUNDLE (default /etc/ssl/certs/ca-certificates.crt; "none" for no extra CAs),
# CNNVIDEO_STANDIN_RPC (1: also gRPC + OpenCV in the image, the default; 0: torch only).
# Prints the build and test times; exit status is pytest's (or the local run's).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE_IMAGE=${CNNVIDEO_STANDIN_BASE:-cnnvideo/debian:bullseye}
IMAGE=${CNNVIDEO_STANDIN_IMAGE:-cnnvideo/pi-standin}
# shellcheck source=scripts/debian_mirror.sh
. "$REPO/scripts/debian_mirror.sh"
CA_BUNDLE=${CNNVIDEO_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
WITH_RPC=${CNNVIDEO_STANDIN_RPC:-1}
# the shared library's tests that need neither torch.fx-only features nor the host's tools
# (vermin, scripts/, services/netem); fx-only cases skip or assert the clear GraphError themselves
DEFAULT_TESTS=(tests/unit/test_codec.py tests/unit/test_hop.py tests/unit/tools/test_chain.py
  tests/unit/test_graph.py tests/unit/test_torch_stage.py tests/unit/test_costmodel.py
  tests/unit/test_schedulers.py tests/unit/test_predict.py tests/unit/test_config.py
  tests/unit/test_config_validation.py tests/unit/test_config_upgrade.py tests/unit/test_models.py tests/unit/test_adapt.py)
RPC_TESTS=(tests/unit/test_video.py tests/unit/tools/test_planner.py tests/unit/tools/test_bench_codec.py)

log() { echo "pi_standin: $*" >&2; }
die() { log "error: $*"; exit 1; }

make_base() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "base image $BASE_IMAGE missing and debootstrap needs root"
  command -v debootstrap >/dev/null || die "debootstrap missing (apt-get install debootstrap)"
  local root mirror start=$SECONDS
  root=$(mktemp -d /var/tmp/cnnvideo-bullseye.XXXXXX)
  mirror=$(debian_mirror 2>/dev/null) || mirror=""
  log "debootstrap --variant=minbase bullseye (from ${mirror:-the default mirror of debootstrap})"
  debootstrap --variant=minbase bullseye "$root" ${mirror:+"$mirror"} >/dev/null
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/* "$root"/dev/*
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  log "base image $BASE_IMAGE made in $((SECONDS - start)) s"
}

build() {
  local ctx start=$SECONDS
  ctx=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$ctx'" RETURN
  if [ "$CA_BUNDLE" != none ] && [ -s "$CA_BUNDLE" ]; then
    cp "$CA_BUNDLE" "$ctx/pi-standin-ca.crt"
  else
    : >"$ctx/pi-standin-ca.crt"
  fi
  # fixed mtimes so unchanged files keep the build cache
  (cd "$REPO" && tar -c --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --exclude=__pycache__ --exclude='*.pyc' --exclude='*_pb2.py' --exclude='*_pb2_grpc.py' \
      --exclude='*.egg-info' --exclude=.pytest_cache --exclude=.hypothesis \
      pyproject.toml README.md proto shared services tools tests docker/pi-standin.Dockerfile \
      -C "$ctx" pi-standin-ca.crt) \
    | docker build -q -f docker/pi-standin.Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --build-arg "WITH_RPC=$WITH_RPC" -t "$IMAGE" - >/dev/null
  log "image $IMAGE built in $((SECONDS - start)) s"
}

run_tests() {
  local start=$SECONDS rc=0 tests
  if [ $# -gt 0 ]; then
    tests=("$@")
  else
    tests=("${DEFAULT_TESTS[@]}")
    [ "$WITH_RPC" = 1 ] && tests+=("${RPC_TESTS[@]}")
  fi
  docker run --rm --network none "$IMAGE" python3 -c \
    "import sys, torch, torchvision; print('python', sys.version.split()[0], 'torch', torch.__version__,
'torchvision', torchvision.__version__, 'torch.fx', hasattr(torch, 'fx'))"
  docker run --rm --network none "$IMAGE" python3 -m pytest -q -ra -p no:cacheprovider "${tests[@]}" || rc=$?
  log "tests ran in $((SECONDS - start)) s (pytest exit $rc)"
  return $rc
}

run_local() {
  local start=$SECONDS rc=0
  # a tiny synthetic clip, a 2-worker alexnet cluster on 127.0.0.1 inside one container
  docker run --rm --network none "$IMAGE" bash -c '
    set -e
    python3 -c "from cnnvideo.video.frames import synthetic_frames, write_video; write_video(\"/tmp/v.avi\", synthetic_frames(10, (96, 128), seed=1))"
    cat >/tmp/c.yml <<EOF
model: alexnet
weights: random
video: /tmp/v.avi
frame_size: [96, 128]
mode: delta
check: true
EOF
    cnnvideo local -c /tmp/c.yml --frames 5 --out /tmp/out
    python3 -c "import json; r = json.load(open(\"/tmp/out/report.json\")); print({k: r[k] for k in (\"completed\", \"lost\", \"model\", \"mode\", \"workers\", \"max_abs_err\")})"
  ' || rc=$?
  log "local run in $((SECONDS - start)) s (exit $rc)"
  return $rc
}

main() {
  local build_only=0 local_run=0
  while [ $# -gt 0 ]; do
    case $1 in
      --build-only) build_only=1 ;;
      --local) local_run=1 ;;
      --) shift; break ;;
      *) die "unknown option $1 (usage: $0 [--build-only] [--local] [-- PYTEST ARGS])" ;;
    esac
    shift
  done
  docker info >/dev/null 2>&1 || die "no Docker engine (run scripts/docker_setup.sh)"
  make_base
  build
  [ "$build_only" = 1 ] && return 0
  local rc=0
  run_tests "$@" || rc=$?
  if [ "$local_run" = 1 ]; then
    [ "$WITH_RPC" = 1 ] || die "--local needs CNNVIDEO_STANDIN_RPC=1"
    run_local || rc=$?
  fi
  return $rc
}

main "$@"
