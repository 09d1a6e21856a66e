#!/usr/bin/env bash
# Build the cnn-video node image (the Dockerfile's `runtime` stage) for several architectures on
# one machine, start each under emulation for a real smoke check, and publish one multi-arch tag:
#   1. qemu: foreign architectures need binfmt handlers with the F flag (Debian's qemu-user-static;
#      installed with binfmt-support when missing and CNNVIDEO_INSTALL=1, the default as root),
#   2. base: cnnvideo/debian:bookworm-ARCH by `debootstrap --arch=ARCH --variant=minbase --foreign`,
#      the second stage under qemu, `docker import`, then the image's architecture set right
#      (engine 20.10 records every import as the host's: scripts/image_arch.py edits it),
#   3. build: the same Dockerfile with the classic builder, FROM that base -> NAME:ARCH,
#   4. smoke: `docker run --platform linux/ARCH`: uname, import torch, the layer graph,
#      `cnnvideo plan`, a tiny `cnnvideo local` (alexnet, 64x96 frames, 3 frames),
#   5. push: NAME:ARCH to the registry (Debian's docker-registry started on 127.0.0.1 when the
#      registry is local and down), then `docker manifest create/push --insecure` joins them
#      into REGISTRY/NAME:TAG, and `docker manifest inspect` must list every architecture.
# --armhf also builds Dockerfile.arm32v7 under armhf emulation as far as it can go (see README).
# --base-only stops at step 2 (the quick path CI runs): the base images become NAME:ARCH
# (default name cnnvideo/base), the smoke check is uname + dpkg's architecture, then step 5.
# Usage: scripts/build_multiarch.sh [--arch amd64,arm64] [--registry HOST:PORT] [--name NAME]
#          [--tag TAG] [--no-smoke] [--no-push] [--armhf] [--base-only]
# Environment: CNNVIDEO_REGISTRY (default 127.0.0.1:5000), CNNVIDEO_INSTALL (1: apt-get install
# what is missing; 0: only say what to install), CNNVIDEO_DEBIAN_MIRROR (default: host's apt
# sources), CNNVIDEO_REGISTRY_DIR (local registry storage, default /var/lib/cnnvideo-registry),
# CNNVIDEO_BINFMT_DIR (default /proc/sys/fs/binfmt_misc). Prints the time of every step.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/debian_mirror.sh
. "$REPO/scripts/debian_mirror.sh"
ARCHES=amd64,arm64
REGISTRY=${CNNVIDEO_REGISTRY:-127.0.0.1:5000}
NAME=""
BASE_ONLY=0
TAG=latest
SMOKE=1
PUSH=1
ARMHF=0
INSTALL=${CNNVIDEO_INSTALL:-1}
REGISTRY_DIR=${CNNVIDEO_REGISTRY_DIR:-/var/lib/cnnvideo-registry}
BINFMT_DIR=${CNNVIDEO_BINFMT_DIR:-/proc/sys/fs/binfmt_misc}
SUITE=bookworm
APT_UPDATED=0

log() { echo "build_multiarch: $*" >&2; }
die() { log "error: $*"; exit 1; }
timed() {
  # timed LABEL CMD...: run CMD, log its duration
  local label=$1 start=$SECONDS
  shift
  "$@"
  log "$label: $((SECONDS - start)) s"
}

apt_install() {
  [ "$INSTALL" = 1 ] && [ "$(id -u)" = 0 ] || return 1
  export DEBIAN_FRONTEND=noninteractive
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq || return 1; APT_UPDATED=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

native_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;; aarch64) echo arm64 ;; armv7l|armv6l) echo armhf ;; *) uname -m ;;
  esac
}

qemu_name() {
  # the binfmt handler name (qemu-NAME) of a Debian architecture
  case $1 in
    amd64) echo x86_64 ;; arm64) echo aarch64 ;; armhf) echo arm ;;
    *) die "unknown architecture '$1' (known: amd64, arm64, armhf)" ;;
  esac
}

docker_platform() {
  case $1 in armhf) echo linux/arm/v7 ;; *) echo "linux/$1" ;; esac
}

oci_arch() {
  # ARCH [VARIANT] as image configs name them
  case $1 in armhf) echo "arm v7" ;; *) echo "$1" ;; esac
}

handler_ok() { [ -f "$BINFMT_DIR/qemu-$1" ] && head -1 "$BINFMT_DIR/qemu-$1" | grep -q '^enabled'; }

check_emulation() {
  # a foreign ARCH runs only through an enabled qemu binfmt handler with the F flag
  local arch=$1 q
  [ "$arch" = "$(native_arch)" ] && return 0
  q=$(qemu_name "$arch")
  if [ "$BINFMT_DIR" = /proc/sys/fs/binfmt_misc ] && ! [ -e "$BINFMT_DIR/status" ]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT_DIR" 2>/dev/null || true
  fi
  if ! handler_ok "$q" && [ "$BINFMT_DIR" = /proc/sys/fs/binfmt_misc ]; then
    if ! [ -x /usr/libexec/qemu-binfmt/"$q"-binfmt-P ] && ! command -v "qemu-$q-static" >/dev/null; then
      log "qemu-user-static missing: installing qemu-user-static binfmt-support"
      apt_install qemu-user-static binfmt-support || true
    fi
    command -v update-binfmts >/dev/null && update-binfmts --enable "qemu-$q" >/dev/null 2>&1 || true
  fi
  handler_ok "$q" || die "no qemu handler for $arch ($BINFMT_DIR/qemu-$q): apt-get install qemu-user-static binfmt-support, mount binfmt_misc (mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc), then update-binfmts --enable qemu-$q"
  grep -q '^flags: .*F' "$BINFMT_DIR/qemu-$q" \
    || die "the qemu-$q handler lacks the F flag, so containers cannot find the interpreter: use Debian's qemu-user-static (it registers with F)"
}

image_arch() { docker image inspect -f '{{.Architecture}}{{with .Variant}} {{.}}{{end}}' "$1" 2>/dev/null; }

base_image() {
  if [ "$1" = "$(native_arch)" ] && [ "$1" != armhf ]; then echo "cnnvideo/debian:$SUITE"; else echo "cnnvideo/debian:$SUITE-$1"; fi
}

make_base() {
  # make_base ARCH: cnnvideo/debian:SUITE-ARCH with the right architecture in its config
  local arch=$1 image root mirror old
  image=$(base_image "$arch")
  if [ "$image" = "cnnvideo/debian:$SUITE" ] && [ "$SUITE" = bookworm ]; then
    docker image inspect "$image" >/dev/null 2>&1 || bash "$REPO/scripts/docker_setup.sh"
    return 0
  fi
  [ "$(image_arch "$image")" = "$(oci_arch "$arch")" ] && return 0
  [ "$(id -u)" = 0 ] || die "base image $image missing and debootstrap needs root"
  command -v debootstrap >/dev/null || apt_install debootstrap || die "debootstrap missing: apt-get install debootstrap"
  root=$(mktemp -d /var/tmp/cnnvideo-rootfs-"$arch".XXXXXX)
  mirror=$(debian_mirror 2>/dev/null) || mirror=""
  log "debootstrap --arch=$arch --variant=minbase --foreign $SUITE (${mirror:-the default mirror of debootstrap})"
  timed "debootstrap first stage ($arch)" debootstrap --arch="$arch" --variant=minbase --foreign \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$SUITE" "$root" ${mirror:+"$mirror"} >/dev/null
  timed "debootstrap second stage under qemu ($arch)" chroot "$root" /debootstrap/debootstrap --second-stage >/dev/null
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/log/* "$root"/dev/*
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$image" >/dev/null
  rm -rf "$root"
  old=$(docker image inspect -f '{{.Id}}' "$image")
  # shellcheck disable=SC2046  # ARCH [VARIANT] as two words
  docker save "$image" | python3 "$REPO/scripts/image_arch.py" $(oci_arch "$arch") | docker load -q >/dev/null
  docker rmi -f "$old" >/dev/null 2>&1 || true
  [ "$(image_arch "$image")" = "$(oci_arch "$arch")" ] || die "base image $image still says $(image_arch "$image"), not $arch"
  log "base image $image ($(image_arch "$image"))"
}

build_node() {
  # build_node ARCH: the Dockerfile's runtime stage FROM the ARCH base, as NAME:ARCH
  local arch=$1 got
  docker build -q --build-arg "BASE_IMAGE=$(base_image "$arch")" --target runtime -t "$NAME:$arch" "$REPO" >/dev/null
  got=$(image_arch "$NAME:$arch")
  [ "$got" = "$(oci_arch "$arch")" ] || die "$NAME:$arch is built for '$got', not $arch: its base $(base_image "$arch") has the wrong architecture (docker rmi it and run again)"
}

smoke() {
  # smoke ARCH: run the image under its platform, no network: torch, layer graph, plan, local run
  local arch=$1
  docker run --rm --platform "$(docker_platform "$arch")" --network none --entrypoint bash "$NAME:$arch" -c '
    set -e
    cd /tmp
    echo "uname -m: $(uname -m)"
    python3 -c "import torch, torchvision; print(\"torch\", torch.__version__, \"torchvision\", torchvision.__version__)"
    python3 -c "from cnnvideo.model.graph import LayerGraph; from cnnvideo.model.zoo import build_model; print(LayerGraph.from_model(build_model(\"alexnet\"), (64, 96)))"
    python3 -c "from cnnvideo.video.frames import synthetic_frames, write_video; write_video(\"/tmp/v.avi\", synthetic_frames(6, (64, 96), seed=1))"
    printf "model: alexnet\nweights: random\nvideo: /tmp/v.avi\nframe_size: [64, 96]\nmode: delta\ncheck: true\nframes: 3\ntrainer:\n  frames: 3\n" >/tmp/c.yml
    cnnvideo plan -c /tmp/c.yml | tail -3
    cnnvideo local -c /tmp/c.yml --frames 3 --out /tmp/out >/tmp/local.log 2>&1 || { tail -30 /tmp/local.log; exit 1; }
    python3 -c "import json; r = json.load(open(\"/tmp/out/report.json\")); print(\"local run:\", {k: r[k] for k in (\"completed\", \"frames\", \"lost\", \"model\", \"workers\", \"max_abs_err\", \"wall_s\")}); assert r[\"completed\"] == r[\"frames\"] == 3"
  '
}

registry_up() { curl -fsS -m 5 "http://$REGISTRY/v2/" >/dev/null 2>&1; }

start_registry() {
  # Debian's docker-registry on 127.0.0.1:PORT, no auth, storage in REGISTRY_DIR
  registry_up && return 0
  case $REGISTRY in
    127.0.0.1:*|localhost:*) ;;
    *) die "registry $REGISTRY does not answer (http://$REGISTRY/v2/): start it, or leave CNNVIDEO_REGISTRY unset so this script runs one on 127.0.0.1:5000" ;;
  esac
  command -v docker-registry >/dev/null || apt_install docker-registry \
    || die "registry $REGISTRY is down and docker-registry is missing: apt-get install docker-registry"
  mkdir -p "$REGISTRY_DIR/data"
  cat >"$REGISTRY_DIR/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $REGISTRY_DIR/data}
  delete: {enabled: true}
http: {addr: $REGISTRY}
EOF
  log "starting docker-registry on $REGISTRY (storage $REGISTRY_DIR/data, log $REGISTRY_DIR/registry.log)"
  setsid nohup docker-registry serve "$REGISTRY_DIR/config.yml" >>"$REGISTRY_DIR/registry.log" 2>&1 </dev/null &
  for _ in $(seq 1 20); do registry_up && return 0; sleep 1; done
  tail -5 "$REGISTRY_DIR/registry.log" >&2 || true
  die "docker-registry did not answer on $REGISTRY within 20 s"
}

push_all() {
  # push NAME:ARCH for every ARCH, then one manifest list REGISTRY/NAME:TAG over them
  local arch ref=$REGISTRY/$NAME:$TAG refs=() have
  for arch in "${ARCH_LIST[@]}"; do
    docker tag "$NAME:$arch" "$REGISTRY/$NAME:$arch"
    timed "push $REGISTRY/$NAME:$arch" docker push -q "$REGISTRY/$NAME:$arch" >/dev/null
    refs+=("$REGISTRY/$NAME:$arch")
  done
  docker manifest rm "$ref" >/dev/null 2>&1 || true
  docker manifest create --insecure "$ref" "${refs[@]}" >/dev/null
  docker manifest push --insecure --purge "$ref" >/dev/null
  have=$(docker manifest inspect --insecure "$ref" | python3 -c '
import json, sys
print(" ".join(sorted("/".join(filter(None, (m["platform"]["os"], m["platform"]["architecture"], m["platform"].get("variant"))))
                      for m in json.load(sys.stdin)["manifests"])))')
  log "$ref lists: $have"
  for arch in "${ARCH_LIST[@]}"; do
    [[ " $have " == *" $(docker_platform "$arch") "* ]] || die "$ref lacks $(docker_platform "$arch") (it lists: $have)"
  done
}

wheel_stop() {
  # the Dockerfile.arm32v7 wheel check's line in a build log, if the build stopped there. The classic
  # builder colours a step's stderr (ESC[91m ... ESC[0m), so strip SGR escapes before matching.
  sed $'s/\e\\[[0-9;]*m//g' <<<"$1" | grep -m1 '^error: no .*armv7l\.whl'
}

armhf() {
  # Dockerfile.arm32v7 under armhf emulation, as far as it goes: the base stage (apt) always, started
  # under qemu; the role image only with the armv7l torch wheels (docker/wheels-armv7l/ or
  # TORCH_WHEELS_URL), else the build stops at the wheel check and says which file is missing.
  # The base is bullseye: buster (Python 3.7, what the Pi image's cp37 wheels need) lives on the
  # Debian archive; CNNVIDEO_ARMHF_SUITE=buster with CNNVIDEO_DEBIAN_MIRROR=<archive mirror> makes that.
  local base start=$SECONDS out rc=0 suite=${CNNVIDEO_ARMHF_SUITE:-bullseye}
  SUITE=$suite timed "base image (armhf, $suite)" make_base armhf
  base=$(SUITE=$suite base_image armhf)
  timed "Dockerfile.arm32v7 base stage (armhf)" docker build -q -f "$REPO/Dockerfile.arm32v7" \
    --build-arg "BASE_IMAGE=$base" --target base -t cnnvideo/arm32v7-base "$REPO" >/dev/null
  docker run --rm --platform linux/arm/v7 --network none cnnvideo/arm32v7-base sh -c \
    'echo "armhf base: $(uname -m), $(python3 --version), numpy $(python3 -c "import numpy; print(numpy.__version__)")"'
  out=$(docker build -f "$REPO/Dockerfile.arm32v7" --build-arg "BASE_IMAGE=$base" \
    ${TORCH_WHEELS_URL:+--build-arg "TORCH_WHEELS_URL=$TORCH_WHEELS_URL"} --target worker -t cnnvideo/worker:armhf \
    "$REPO" 2>&1) || rc=$?
  if [ "$rc" = 0 ]; then
    log "armhf: cnnvideo/worker:armhf built in $((SECONDS - start)) s"
  elif wheel_stop "$out" >/dev/null; then
    log "armhf: stopped at the torch wheels, as expected without them: $(wheel_stop "$out")"
  else
    tail -20 <<<"$out" >&2
    die "Dockerfile.arm32v7 failed under armhf emulation (see above)"
  fi
  log "armhf total: $((SECONDS - start)) s"
}

main() {
  while [ $# -gt 0 ]; do
    case $1 in
      --arch) ARCHES=${2:?}; shift ;;
      --registry) REGISTRY=${2:?}; shift ;;
      --name) NAME=${2:?}; shift ;;
      --tag) TAG=${2:?}; shift ;;
      --no-smoke) SMOKE=0 ;;
      --no-push) PUSH=0 ;;
      --armhf) ARMHF=1 ;;
      --base-only) BASE_ONLY=1 ;;
      -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; return 0 ;;
      *) die "unknown option $1 (see --help)" ;;
    esac
    shift
  done
  IFS=, read -r -a ARCH_LIST <<<"$ARCHES"
  if [ -z "$NAME" ]; then if [ "$BASE_ONLY" = 1 ]; then NAME=cnnvideo/base; else NAME=cnnvideo/node; fi; fi
  local arch total=$SECONDS
  for arch in "${ARCH_LIST[@]}"; do
    case $arch in amd64|arm64) ;; *) die "--arch: '$arch' is not amd64 or arm64 (the 32-bit image is --armhf)" ;; esac
  done
  for arch in "${ARCH_LIST[@]}"; do check_emulation "$arch"; done
  [ "$ARMHF" = 1 ] && check_emulation armhf
  [ "$PUSH" = 1 ] && start_registry
  docker info >/dev/null 2>&1 || die "no Docker engine answers (run scripts/docker_setup.sh)"
  for arch in "${ARCH_LIST[@]}"; do
    timed "base image ($arch)" make_base "$arch"
    if [ "$BASE_ONLY" = 1 ]; then
      docker tag "$(base_image "$arch")" "$NAME:$arch"
      [ "$SMOKE" = 1 ] && timed "base smoke check ($arch)" docker run --rm --platform "$(docker_platform "$arch")" \
        --network none "$NAME:$arch" sh -c 'echo "uname -m: $(uname -m), dpkg: $(dpkg --print-architecture)"'
      continue
    fi
    timed "image build $NAME:$arch" build_node "$arch"
    [ "$SMOKE" = 1 ] && timed "smoke check ($arch, $(docker_platform "$arch"))" smoke "$arch"
  done
  [ "$PUSH" = 1 ] && timed "push + manifest $REGISTRY/$NAME:$TAG" push_all
  [ "$ARMHF" = 1 ] && armhf
  log "total: $((SECONDS - total)) s"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
