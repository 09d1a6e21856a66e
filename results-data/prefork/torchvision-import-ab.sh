# A/B of the torchvision import (docs/results/prefork): the five files that import it, at BEFORE (0c22b37) and AFTER, swapped in between runs, interleaved; each line: side, CPU s of the whole run, wall s
set -e
cd "$(dirname "$0")/../.."
AFTER=${AFTER:-$(git rev-parse HEAD)}
BEFORE=${BEFORE:-0c22b37}
FILES="shared/cnnvideo/model/zoo.py shared/cnnvideo/model/catalog.py shared/cnnvideo/model/detector.py shared/cnnvideo/results/labels.py tools/prefork.py"
run() { .venv/bin/python tools/probes/cpu_of_tree.py .venv/bin/cnnvideo local -c docs/results/prefork/uncapped.yml --out /tmp/pfb/$1 2>&1 | awk -v tag=$1 '/sampled in all/ {print tag, $1}'; }
run warm
for i in 1 2 3 4 5 6; do
  git checkout -q $BEFORE -- $FILES; s=$(date +%s.%N); r=$(run before); e=$(date +%s.%N); echo "$r $(echo "$e - $s" | bc)"
  git checkout -q $AFTER -- $FILES; s=$(date +%s.%N); r=$(run after); e=$(date +%s.%N); echo "$r $(echo "$e - $s" | bc)"
done
git checkout -q $AFTER -- $FILES
git status --short
