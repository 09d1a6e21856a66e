#!/bin/bash
# interleaved pairs of the master-CPU probe: 52f4215 (before the thumbnail change) and HEAD
set -e
cd /work/main
pyb=$(bash tools/probes/tree_at.sh 52f4215 /tmp/mb)
pya=$(bash tools/probes/tree_at.sh HEAD /tmp/ma)  # HEAD was f351084 when these ran
for d in mb ma; do sed "s#^out: .*#out: /tmp/$d/out\ncache_dir: /tmp/${d}cache#" docs/results/master-cpu/edge-c04.yml > /tmp/$d/edge-c04.yml; done
# warm each cache with one run
for d in mb ma; do (cd /tmp/$d/src && /tmp/$d/venv/bin/python /work/main/tools/probes/cpu_per_frame.py /tmp/$d/edge-c04.yml > /tmp/$d-warm.json 2>/tmp/$d-warm.err) || true; done
for i in 1 2 3; do
  for d in mb ma; do
    (cd /tmp/$d/src && /tmp/$d/venv/bin/python /work/main/tools/probes/cpu_per_frame.py /tmp/$d/edge-c04.yml > /tmp/$d-$i.json 2>/tmp/$d-$i.err) || echo "$d $i failed"
    echo "$d $i done $(date +%T)"
  done
done
