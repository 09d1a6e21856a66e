#!/bin/bash
# /tmp/prefork.old.py: git show 52f4215:tools/prefork.py (sys.exit); /tmp/prefork.new.py: tools/prefork.py with leave()
# A/B: tools/prefork.py with sys.exit (old) against leave() (new), test_local_cluster.py with the hub, CPU-s
cd /work/main
for kind in old new old new; do
  cp /tmp/prefork.$kind.py tools/prefork.py
  out=$(.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadscope tests/integration/test_local_cluster.py 2>&1)
  echo "$kind: $(echo "$out" | grep "in all"), $(echo "$out" | grep -E "passed|failed" | tail -1), $(echo "$out" | grep "^host:")" | tee -a /tmp/exitab.txt
done
cp /tmp/prefork.new.py tools/prefork.py
