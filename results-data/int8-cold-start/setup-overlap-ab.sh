cd /work/main
run() {  # $1 label
  rm -rf /tmp/cnnvideo-cold-master /tmp/cold-$1
  t0=$(date +%s.%N)
  .venv/bin/python -m cnnvideo local -c docs/results/int8-cold-start/master.yml --out /tmp/cold-$1 > /tmp/cold-$1.log 2>&1
  rc=$?
  python3 - "$1" "$t0" "$rc" <<'PY'
import json, sys
label, t0, rc = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rs = [json.loads(l) for l in open("/tmp/cold-%s/results.jsonl" % label)]
r = json.load(open("/tmp/cold-%s/report.json" % label))
first = min(x["result_time"] for x in rs)
print(json.dumps({"run": label, "rc": int(rc), "first_result_after_command_s": round(first - t0, 1),
                  "completed": r["completed"], "lost": r["lost"], "max_abs_err": r["max_abs_err"]}))
PY
}
for i in 1 2; do
  git apply -R /tmp/p-setup.diff; run before$i
  git apply /tmp/p-setup.diff; run after$i
done
