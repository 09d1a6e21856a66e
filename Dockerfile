# cnn-video images for a 64-bit Debian host or Pi (amd64, arm64), one target per role:
#   docker build --target worker  -t cnnvideo/worker .     (also: trainer, master, netem)
# The classic builder runs every stage above the target, so the small netem stage comes first.
# Every role shares the `base` layers (Python, Debian's torch 1.13 / torchvision 0.14, gRPC,
# OpenCV), so they are stored once. Only Debian packages are used: no PyPI access is needed
# inside the build. The pure-Python wheels Debian lacks (grpcio-health-checking; paho-mqtt 2.x for events, as
# bookworm's python3-paho-mqtt is 1.6) and ONNX Runtime (no Debian
# package; the cp311 manylinux wheels for this architecture of onnxruntime and of the onnx >= 1.13 and ml_dtypes
# its quantiser needs, installed without their PyPI dependencies, which Debian's numpy / protobuf / packaging /
# flatbuffers stand in for) come from build/wheels/, filled on the host by
# scripts/docker_setup.sh; so does torchvision's trained MobileNetV2
# checkpoint (build/weights/, from scripts/fetch_weights.sh), put in the images' torch hub cache (TORCH_HOME),
# and the person detector (build/models/, from scripts/fetch_detector.sh), put in their model cache.
# BASE_IMAGE: cnnvideo/debian:bookworm is made locally by scripts/docker_setup.sh (debootstrap);
# with a registry, `--build-arg BASE_IMAGE=debian:bookworm-slim` works the same.
ARG BASE_IMAGE=cnnvideo/debian:bookworm

# ---- netem: the tc helper (Debian's docker SDK, iproute2, nsenter); small, no torch --------
FROM ${BASE_IMAGE} AS netem
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-docker python3-yaml iproute2 util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY services/netem/ /opt/netem/netem/
COPY shared/cnnvideo/tcrules.py /opt/netem/netem/tcrules.py
WORKDIR /opt/netem
ENV PYTHONPATH=/opt/netem
# It must run as root: nsenter into other containers' network namespaces needs CAP_SYS_ADMIN
# and CAP_NET_ADMIN in the initial user namespace (compose grants only those, not privileged).
# hadolint ignore=DL3002
USER 0
HEALTHCHECK --interval=5s --timeout=3s --retries=3 CMD ["test", "-f", "/tmp/netem.ready"]
ENTRYPOINT ["python3", "-m", "netem"]
CMD ["--help"]

# ---- base: runtime packages shared by every role -------------------------------------------
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1
# Versions come from the pinned Debian release (bookworm), hence no per-package pins.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-numpy python3-yaml python3-grpcio python3-protobuf \
      python3-torch python3-torchvision python3-opencv python3-zstandard python3-lz4 \
      python3-onnx python3-packaging python3-flatbuffers python3-prometheus-client \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
# /var/cache/cnnvideo is shared by roles that may run as different users (see entrypoint.sh)
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/cnnvideo cnnvideo \
 && install -d -o cnnvideo -g cnnvideo -m 0755 /app /app/out \
 && install -d -m 1777 /var/cache/cnnvideo
# `weights: imagenet` with mobilenet_v2 loads this file through torchvision's weights API, with no download
ENV TORCH_HOME=/usr/share/cnnvideo/torch
COPY build/weights/mobilenet_v2-b0353104.pth /usr/share/cnnvideo/torch/hub/checkpoints/
# the model cache (cnnvideo.artifacts.models_dir()): the person detector, when build/models/ holds it
ENV CNNVIDEO_MODELS=/usr/share/cnnvideo/models
COPY build/models/ /usr/share/cnnvideo/models/

# ---- build: stubs from proto with Debian's protoc (paired with the 3.21 runtime), then install
FROM base AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3-pip python3-setuptools python3-wheel protobuf-compiler protobuf-compiler-grpc \
      opencv-doc \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# What does not change with the source comes first, so a source change rebuilds only the project's own install.
# It goes to /deps and the project to /install: the runtime copies each in a layer of its own, so a source change
# writes the project's few MB again, not ONNX Runtime's 150 MB with it.
COPY build/wheels/ /wheels/
# ONNX Runtime: the wheels of this image's architecture (engine: onnxruntime): onnxruntime, and onnx + ml_dtypes
# for its int8 quantiser (precision: int8). Without them (armv7, or a context that scripts/docker_setup.sh did not
# fill) the image has none and workers run torch, saying so. They are local files of pinned versions
# (scripts/docker_setup.sh: ORT_WHEELS), installed with no dependencies over Debian's numpy and protobuf; onnx 1.17 shadows Debian's 1.12.
# hadolint ignore=DL3013
RUN set -- /wheels/onnxruntime-*_"$(uname -m)".whl; \
    if [ -f "$1" ]; then \
      pip install --no-deps --no-index --no-cache-dir --break-system-packages --root /deps \
        "$1" /wheels/onnx-*_"$(uname -m)".whl /wheels/ml_dtypes-*_"$(uname -m)".whl; \
    else echo "no ONNX Runtime wheel for $(uname -m) in build/wheels: the image runs torch only"; fi
# the sample static-camera video (768x576 pedestrians) from Debian's opencv-doc
RUN install -D -m 0644 "$(find /usr/share/doc/opencv-doc -name vtest.avi | head -1)" /deps/usr/share/cnnvideo/vtest.avi
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY shared/ shared/
COPY services/master/ services/master/
COPY services/worker/ services/worker/
COPY services/trainer/ services/trainer/
COPY tools/ tools/
# The proto sits at cnnvideo/rpc/ in the include tree so generated code says
# `from cnnvideo.rpc import cnnvideo_pb2`, exactly as `python -m cnnvideo.rpc.generate` does.
RUN mkdir -p /tmp/proto/cnnvideo/rpc /tmp/gen \
 && cp proto/cnnvideo.proto /tmp/proto/cnnvideo/rpc/ \
 && protoc -I/tmp/proto --python_out=/tmp/gen --grpc_out=/tmp/gen \
      --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin cnnvideo/rpc/cnnvideo.proto \
 && cp /tmp/gen/cnnvideo/rpc/cnnvideo_pb2.py /tmp/gen/cnnvideo/rpc/cnnvideo_pb2_grpc.py shared/cnnvideo/rpc/ \
 && pip install --no-deps --no-build-isolation --no-index --no-cache-dir --break-system-packages \
      --root /install . /wheels/grpcio_health_checking-*.whl /wheels/paho_mqtt-*.whl

# ---- runtime: the project installed on top of base; the role targets below only set defaults
FROM base AS runtime
COPY --from=build /deps/ /
COPY --from=build /install/ /
COPY docker/entrypoint.sh /usr/local/bin/cnnvideo-entrypoint
COPY docker/healthcheck.sh /usr/local/lib/cnnvideo/healthcheck.sh
WORKDIR /app
ENV HOME=/home/cnnvideo CNNVIDEO_OUT=/app/out CNNVIDEO_HEARTBEAT=/tmp/cnnvideo.alive
USER 10001
ENTRYPOINT ["cnnvideo-entrypoint"]
CMD ["--help"]

FROM runtime AS worker
ENV CNNVIDEO_PORT=50060
EXPOSE 50060
HEALTHCHECK --interval=5s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/usr/local/lib/cnnvideo/healthcheck.sh"]
CMD ["worker", "-c", "/app/configs/compose.yml", "-i", "0"]

FROM runtime AS trainer
ENV CNNVIDEO_PORT=50051
EXPOSE 50051
HEALTHCHECK --interval=5s --timeout=5s --start-period=300s --retries=3 \
  CMD ["/usr/local/lib/cnnvideo/healthcheck.sh"]
CMD ["trainer", "-c", "/app/configs/compose.yml"]

# The master only dials out (no server to probe). It starts as root only to make a bind-mounted
# output folder writable; the entry point then drops to that folder's owner (never root).
FROM runtime AS master
HEALTHCHECK NONE
# hadolint ignore=DL3002
USER 0
CMD ["master", "-c", "/app/configs/compose.yml"]
