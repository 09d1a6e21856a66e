# A/B of the project's bytecode (docs/results/prefork), with PYTHONDONTWRITEBYTECODE=1 as in the shell that measured
# it: each pair runs once with no __pycache__ under shared/services/tools, once after `make bytecode`; each line:
# side, CPU s of the whole run
set -e
cd "$(dirname "$0")/../.."
export PYTHONDONTWRITEBYTECODE=1
run() { .venv/bin/python tools/probes/cpu_of_tree.py .venv/bin/cnnvideo local -c docs/results/prefork/uncapped.yml --out /tmp/pfb/$1 2>&1 | awk -v tag=$1 '/sampled in all/ {print tag, $1}'; }
for i in $(seq 1 ${PAIRS:-12}); do
  find shared services tools -name __pycache__ -prune -exec rm -rf {} +
  run source
  make -s bytecode
  run bytecode
done
