"""One line of a cpu_per_frame.py JSON: fps, CPU ms a frame, minor faults a frame and peak RSS (MiB) per role."""
import json
import sys

d = json.load(open(sys.argv[1]))
print(sys.argv[2], d["fps"], d["cpu_ms_per_frame"], d.get("minor_faults_per_frame"), d.get("peak_rss_mib"))
