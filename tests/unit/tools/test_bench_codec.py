"""`cnnvideo bench codec --json` runs end to end on a small synthetic video and prints the documented fields."""
import json
import os
import subprocess
import sys

HOP_FIELDS = ["name", "bytes_dense_fp32", "bytes", "bytes_baseline", "encode_mbps", "decode_mbps",
              "baseline_encode_mbps", "baseline_decode_mbps"]
SUMMARY_FIELDS = ["ratio_vs_baseline_median", "input_ratio_vs_baseline", "speedup_vs_baseline_median"]


def test_bench_codec_json(synthetic_video):
    """The bench prints one JSON object with positive per-hop figures and summary ratios (not the targets)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "cnnvideo", "bench", "codec", "--json", "--frames", "3", "--frame-size", "64", "96",
           "--video", synthetic_video]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout.decode())
    assert result["model"] == "alexnet" and result["weights"] == "random" and result["frames"] == 3
    assert result["video"] == synthetic_video and result["threshold"] == 0.0
    hops = result["hops"]
    assert hops[0]["name"] == "input" and len(hops) > 5
    for hop in hops:
        for field in HOP_FIELDS[1:]:
            assert hop[field] > 0, (hop["name"], field)
        assert hop["max_abs_err"] == 0.0  # lossless at threshold 0
    for field in SUMMARY_FIELDS:
        assert result[field] > 0
