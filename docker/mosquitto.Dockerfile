# The optional MQTT broker for events (docker-compose.yml, profile `events`): Debian's mosquitto on the
# project's base image, listening on 1883 for the compose network only (no port is published to the host).
# Anonymous clients are allowed because that network is private to the compose project; publish the port
# or reuse this image elsewhere only with `allow_anonymous false` and a password file (mosquitto_passwd).
#   docker build -f docker/mosquitto.Dockerfile -t cnnvideo/mosquitto .
ARG BASE_IMAGE=cnnvideo/debian:bookworm
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends mosquitto \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY docker/mosquitto.conf /etc/mosquitto/cnnvideo.conf
USER mosquitto
EXPOSE 1883
HEALTHCHECK --interval=3s --timeout=3s --retries=5 CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/1883"]
ENTRYPOINT ["/usr/sbin/mosquitto"]
CMD ["-c", "/etc/mosquitto/cnnvideo.conf"]
