#!/bin/bash
# A/B of make setup's venv install: pip compiling (old) vs --no-compile + compileall -j0 (new); fresh venv each
cd /tmp/venvab
for kind in old new old new; do
  rm -rf v; python3 -m venv v
  start=$(date +%s.%N)
  v/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1
  if [ $kind = old ]; then
    v/bin/python -m pip install -q torch torchvision >/dev/null 2>&1
  else
    v/bin/python -m pip install -q --no-compile torch torchvision >/dev/null 2>&1
    v/bin/python -m compileall -q -j 0 v/lib/python3.11/site-packages >/dev/null 2>&1 || true
  fi
  end=$(date +%s.%N)
  n=$(find v/lib/python3.11/site-packages -name '*.pyc' | wc -l)
  echo "$kind $(echo "$end - $start" | bc) s, $n pyc" | tee -a /tmp/venvab/result.txt
done
