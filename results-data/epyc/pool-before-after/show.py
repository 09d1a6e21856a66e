"""The before/after table of runs.json (python3 show.py): per cell and side, fps, the model's CPU a frame (mean of
the workers' stage CPU), their product (the cores the model kept busy: fps x CPU seconds a frame) and the master's CPU
a frame; then each cell's after/before of the median fps and of the median product."""
import json
import os
import statistics as st

runs = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs.json")))
cells = sorted({r["cell"] for r in runs}, key=lambda c: int(c.split("_w")[1].split("_")[0]))
sides = sorted({r["side"] for r in runs}, reverse=True)  # before, after
med = {}
print("| cell | side | fps | model CPU a frame (ms) | fps x model CPU a frame | master CPU a frame (ms) |")
print("|---|---|---|---|---|---|")
for cell in cells:
    for side in sides:
        rs = sorted((r for r in runs if r["cell"] == cell and r["side"] == side), key=lambda r: r["invocation"])
        stage = [st.mean(w["stage_cpu_ms"] for w in r["workers"].values()) for r in rs]
        fps = [r["throughput_fps"] for r in rs]
        busy = [f * s / 1000 for f, s in zip(fps, stage)]
        med[cell, side] = st.median(fps), st.median(busy)
        print("| %s | %s | %s | %s | %s | %s |" % (cell, side, " / ".join("%.2f" % x for x in fps),
                                                   " / ".join("%.1f" % x for x in stage),
                                                   " / ".join("%.3f" % x for x in busy),
                                                   " / ".join("%.1f" % r["master_cpu_per_frame_ms"] for r in rs)))
print()
for cell in cells:
    (fb, bb), (fa, ba) = med[cell, sides[0]], med[cell, sides[1]]
    print("%s: median fps after/before %.3f, median fps x model CPU after/before %.3f" % (cell, fa / fb, ba / bb))
