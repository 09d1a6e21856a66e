cd /work/main
# /tmp/nofit.yml: docs/results/int8-cold-start/master.yml with `int8: {fit_below: 0}` added (the check off)
run() {  # $1 label $2 config
  rm -rf /tmp/cnnvideo-cold-master /tmp/cold-$1
  t0=$(date +%s.%N)
  .venv/bin/python -m cnnvideo local -c $2 --out /tmp/cold-$1 > /tmp/cold-$1.log 2>&1
  rc=$?
  python3 - "$1" "$t0" "$rc" <<'PY'
import json, sys
label, t0, rc = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rs = [json.loads(l) for l in open("/tmp/cold-%s/results.jsonl" % label)]
r = json.load(open("/tmp/cold-%s/report.json" % label))
first = min(x["result_time"] for x in rs)
c = r.get("int8_calibration") or {}
print(json.dumps({"run": label, "rc": int(rc), "first_result_after_command_s": round(first - t0, 1),
                  "completed": r["completed"], "lost": r["lost"], "recipe": c.get("recipe"), "fit_s": c.get("fit_s"),
                  "f1": (r.get("detection_agreement") or {}).get("f1")}))
PY
}
for i in 1 2; do
  run nofit$i /tmp/nofit.yml
  run fit$i docs/results/int8-cold-start/master.yml
done
