#!/usr/bin/env bash
# A/B of one change to the master (a patch file) on tools/probes/cpu_per_frame.py's N = 4 run, interleaved pairs:
# A = the tree as it is, B = the tree with the patch applied; each run's JSON goes to OUT/{A,B}-<i>.json.
# Usage: bash results-data/master-cpu-44/ab.sh PATCH OUT [PAIRS] [CONFIG]
set -euo pipefail
cd "$(dirname "$0")/../.."
patch=$1 out=$2 pairs=${3:-3} cfg=${4:-results-data/pool-ab-44/cpu-n4.yml}
mkdir -p "$out"
for i in $(seq "$pairs"); do
  for side in A B; do
    [ "$side" = B ] && git apply "$patch"
    .venv/bin/python tools/probes/cpu_per_frame.py "$cfg" > "$out/$side-$i.json" 2>/dev/null || true
    [ "$side" = B ] && git apply -R "$patch"
    python3 results-data/master-cpu-44/show.py "$out/$side-$i.json" "$side-$i"
  done
done
