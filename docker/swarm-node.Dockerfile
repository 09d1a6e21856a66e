# A "device" for the swarm test (tests/docker/test_swarm.py): a Debian node with its own Docker
# engine, run docker-in-docker (see scripts/dind_test.sh for the flags it needs), joined to a swarm.
# docker-registry serves the test's images on the manager; iproute2 shows the shaping rules.
ARG BASE_IMAGE=cnnvideo/debian:bookworm
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# Versions come from the pinned Debian release (bookworm), hence no per-package pins.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends docker.io iptables iproute2 ca-certificates curl python3 docker-registry \
 && rm -rf /var/lib/apt/lists/*
# dockerd in the background (log in /var/log/dockerd.log), then keep the container alive
CMD ["bash", "-c", "dockerd >/var/log/dockerd.log 2>&1 & exec sleep infinity"]
