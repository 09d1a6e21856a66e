#!/bin/sh
# Container health probe: healthy while the role's server has touched $CNNVIDEO_HEARTBEAT within the last
# ${1:-10} seconds. The server touches it every 2 s after its own gRPC health check over a real channel
# answers SERVING (cnnvideo.rpc.net.Heartbeat). No Python here on purpose: a probe that imports grpc costs
# ~0.12 s of CPU, a fifth of a 0.2-CPU cap at a 3 s interval, and that slowed every capped worker.
f=${CNNVIDEO_HEARTBEAT:-/tmp/cnnvideo.alive}
[ -f "$f" ] || exit 1
age=$(( $(date +%s) - $(stat -c %Y "$f") ))
[ "$age" -lt "${1:-10}" ]
