"""`cnnvideo local` as root with tc links (each run in a network namespace of its own): the CPU caps of `cpus:`
still hold (the roles join their cgroups on the host's /sys/fs/cgroup), and a live camera on the host's 127.0.0.1
that serves one client is opened once, by the master, through the host's network; the trainer fits on the frames
the master captured."""
import json
import os
import re
import sys
import urllib.request

import pytest

from cnnvideo.tools import linkemu

from .helpers import LocalRun, base_config, write_config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from streams import FfmpegStream, free_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VTEST = os.path.join(REPO, "media", "vtest.avi")
PROFILED = re.compile(r"profiled \d+ segments in [\d.]+ s: ([\d.]+) s compute per frame.*wall/CPU ([\d.]+)")


def need_tc():
    ok, why = linkemu.netns_possible()
    if not ok:
        pytest.skip("tc in a network namespace is not possible here: %s" % why)


def cgroup_cpu(pid):
    """The CFS cap of process `pid` and what it did, read from the host's cgroup files that /proc/<pid>/cgroup
    names (v1 cpu controller, else v2): {"quota": (quota_us, period_us) or None if uncapped, "throttled": times
    the cgroup was throttled, "throttled_s": seconds it spent throttled}."""
    with open("/proc/%d/cgroup" % pid) as fh:
        rows = [line.strip().split(":", 2) for line in fh]

    def read(path):
        with open(path) as fh:
            return fh.read()

    def stat(path):
        return dict((k, int(v)) for k, v in (line.split() for line in read(path).splitlines()))

    for _, controllers, path in rows:
        if "cpu" in controllers.split(","):
            for d in ("cpu", "cpu,cpuacct"):
                base = os.path.join("/sys/fs/cgroup", d, path.lstrip("/"))
                if os.path.isfile(os.path.join(base, "cpu.cfs_quota_us")):
                    quota = int(read(os.path.join(base, "cpu.cfs_quota_us")))
                    period = int(read(os.path.join(base, "cpu.cfs_period_us")))
                    st = stat(os.path.join(base, "cpu.stat"))
                    return {"quota": (quota, period) if quota > 0 else None, "throttled": st["nr_throttled"],
                            "throttled_s": st["throttled_time"] / 1e9}
    for _, controllers, path in rows:
        if controllers == "":
            base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
            if os.path.isfile(os.path.join(base, "cpu.max")):
                quota, period = read(os.path.join(base, "cpu.max")).split()
                st = stat(os.path.join(base, "cpu.stat"))
                return {"quota": None if quota == "max" else (int(quota), int(period)),
                        "throttled": st.get("nr_throttled", 0), "throttled_s": st.get("throttled_usec", 0) / 1e6}
    return {"quota": None, "throttled": 0, "throttled_s": 0.0}


def profile_s(out, worker):
    """(seconds of compute per frame, wall/CPU ratio of whole passes) the worker's profile measured (its log), or
    None when it loaded the profile the other worker of this host had just cached (same host, same cache: a
    race, printed only)."""
    with open(os.path.join(out, "%s.log" % worker)) as fh:
        found = PROFILED.search(fh.read())
    return (float(found.group(1)), float(found.group(2))) if found else None


@pytest.mark.slow
@pytest.mark.serial  # reads throttled time under the caps: runs alone
def test_cpu_caps_hold_under_tc_links(tmp_path, synthetic_video):
    """With tc links and cpus {worker0: 0.1, worker1: 0.1}: the report (and the run summary) says cgroup caps
    and tc links; each worker process sits, while it runs, in a cgroup with a CFS quota of 10 ms per 100 ms; and
    the cap acts. The kernel throttled each capped worker for over 0.1 s by the time the first frame was sent
    (0.4 s measured with roles forked from the preloaded server, 19 s when each role still imported torch under its
    cap; a run capped at 1.0 CPU: for at most a fifth of that, 0 s measured), and the
    model's compute per frame in the run (summed over the workers: the two runs may cut it differently) is at
    least twice that of the same run at 1.0 CPU (2.6-4.6x measured). The profiles' numbers are printed, not
    asserted: on this shared 2-core host (load ~6) a worker at 1.0 CPU got so little CPU that its profile's
    wall/CPU ratio was 4-10 too, so wall times tell the cap from contention only by a margin here."""
    need_tc()
    seen = {}
    for share in (0.1, 1.0):
        # 240x320: a whole AlexNet pass takes several CFS periods of CPU, so the throttling shows (at 96x128 a
        # pass fits in one period's 10 ms quota as often as not)
        data = base_config(synthetic_video, str(tmp_path / ("cache%g" % share)), frame_size=[240, 320], frames=8,
                           in_flight=2, check=False, trainer={"frames": 4}, cpus={"worker0": share, "worker1": share},
                           local={"links": "tc", "cpus": "auto"})
        name = "caps%g" % share
        run = LocalRun(write_config(str(tmp_path / (name + ".yml")), data), str(tmp_path / name))
        run.wait_for(lambda r=run: "w0" in r.pids and "w1" in r.pids, 120)
        quotas = {w: cgroup_cpu(run.pids[w])["quota"] for w in ("w0", "w1")}  # processes of the inner launcher
        run.wait_for(lambda r=run: r.sent >= 1, 300)  # the workers have loaded and profiled
        cpu = {w: cgroup_cpu(run.pids[w]) for w in ("w0", "w1")}
        code, report, log = run.finish(300)
        assert code == 0, log[-3000:]
        assert quotas == {w: (int(share * 100000), 100000) for w in ("w0", "w1")}, quotas
        assert report["link_emulation"] == "tc", report["link_emulation"]
        assert report["cpu_caps"]["method"].startswith("cgroup"), report["cpu_caps"]
        assert report["cpu_caps"]["shares"] == {"w0": share, "w1": share}
        assert re.search(r"cpu caps +cgroup-v\d: w0 %g, w1 %g" % (share, share), run.stdout), run.stdout[-2000:]
        seen[share] = {w: {"throttled_s": round(cpu[w]["throttled_s"], 2),
                           "profile": profile_s(str(tmp_path / name), w),
                           # a worker the plan left empty computes nothing (no stage in the report)
                           "run_compute_s": ((report["stages"].get(w) or {}).get("compute") or {}).get("mean_s", 0.0)}
                     for w in ("w0", "w1")}
        print("cap %g: %s" % (share, seen[share]))
    for w in ("w0", "w1"):
        assert seen[0.1][w]["throttled_s"] > 0.1 and seen[1.0][w]["throttled_s"] < seen[0.1][w]["throttled_s"] / 5
    # the whole model per frame (the two runs may split it differently: compare the sum over the workers)
    whole = {share: sum(seen[share][w]["run_compute_s"] for w in ("w0", "w1")) for share in seen}
    print("compute per frame, whole model: %.3f s at 0.1 CPU, %.3f s at 1.0 (%.1fx)"
          % (whole[0.1], whole[1.0], whole[0.1] / whole[1.0]))
    assert whole[0.1] >= 2 * whole[1.0], seen


def test_caps_that_cannot_be_applied_stop_the_run(tmp_path, synthetic_video):
    """Caps asked for (`cpus:`, local.cpus auto) where /sys/fs/cgroup is empty (a private mount namespace with
    an empty tmpfs over it: what `ip netns exec` used to leave the launcher): `cnnvideo local` starts no role
    and exits non-zero with one line naming the cause; `local.cpus: none` opts out (uncapped, and said so)."""
    import shutil
    import subprocess

    from .helpers import REPO, env

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a mount namespace)")
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=4, cpus={"worker0": 0.1, "worker1": 0.1},
                       local={"links": "none", "cpus": "auto"})
    path = write_config(str(tmp_path / "c.yml"), data)
    script = 'mount -t tmpfs -o ro none /sys/fs/cgroup && exec "$@"'
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                           sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env(), cwd=REPO, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr[-3000:]
    assert re.search(r"config key 'cpus' asks for CPU caps \(w0 0.1, w1 0.1\) but no cgroup is writable here "
                     r"\(.*/sys/fs/cgroup.*\); set local.cpus: none to run uncapped", errors[0]), errors
    assert "[local] started" not in proc.stderr and not os.path.exists(str(tmp_path / "out" / "report.json"))
    caps = linkemu.CpuCaps({"w0": 0.1}, "none", root=str(tmp_path / "no-cgroup"))
    assert caps.summary() == {"method": "none", "shares": {}, "note": "local.cpus: none: roles ran uncapped"}


@pytest.mark.slow
def test_single_client_camera_on_host_loopback_under_tc(tmp_path):
    """ffmpeg serves vtest.avi as a live MJPEG stream that takes one client (-listen 1) on the host's 127.0.0.1;
    `cnnvideo local` runs with the default links (auto: tc here, every role in a namespace of its own). The
    master reads the stream from the host's network, the trainer fits on the master's first frames (it never
    connects), the live view answers from the host during the run, and 20 frames complete."""
    need_tc()
    if not os.path.isfile(VTEST):
        pytest.skip("media/vtest.avi is absent (make video)")
    port = free_port()
    with FfmpegStream(VTEST) as stream:
        data = base_config(stream.url, str(tmp_path / "cache"), frames=20, in_flight=2, check=True,
                           trainer={"frames": 6}, live_view={"port": port})
        data.pop("local")  # the default: links auto, cpus auto
        run = LocalRun(write_config(str(tmp_path / "cam.yml"), data), str(tmp_path / "out"))
        run.wait_for(lambda: run.sent >= 1, 180)
        with urllib.request.urlopen("http://127.0.0.1:%d/state.json" % port, timeout=10) as resp:
            state = json.loads(resp.read())
        code, report, log = run.finish(180)
    assert code == 0, log[-3000:]
    assert "tc in network namespace" in log and report["link_emulation"] == "tc"
    assert report["completed"] == report["frames"] == 20 and report["lost"] == 0
    st = report["source"]
    assert st["kind"] == "stream" and st["to_trainer"] == 6 and st["reconnects"] == 0, st
    assert st["captured"] == st["taken"] + st["to_trainer"] + st["skipped"], st
    assert "master's 6 frames" in log and "cannot open stream" not in log
    assert report["check"]["max_abs_err"] == 0.0
    assert isinstance(state, dict) and state, state
    print("camera: %d captured, %d to the trainer, %d skipped; live view state keys %s"
          % (st["captured"], st["to_trainer"], st["skipped"], sorted(state)[:6]))


@pytest.mark.slow
def test_trainer_fits_on_frames_put_by_the_master_and_never_connects(tmp_path):
    """A trainer whose run video is a live stream (no trainer.video) never connects to it: GetPredictors before
    any frames answers NOT_FOUND (a master re-sends them then: a restarted trainer has lost them), malformed or
    too few frames are refused with INVALID_ARGUMENT, and after PutFrames with trainer.frames frames of the
    run's size it fits on them and serves predictors; the stream served no connection all along."""
    import subprocess

    import grpc
    import numpy as np
    from streams import MjpegServer, pattern

    from cnnvideo import config
    from cnnvideo.rpc import cnnvideo_pb2 as pb
    from cnnvideo.rpc import cnnvideo_pb2_grpc as pb_grpc
    from cnnvideo.rpc import net

    from .helpers import REPO, env, master_settings, stop_procs

    with MjpegServer(lambda n: pattern(100, (96, 128), seed=n), fps=25.0) as cam:
        address = "127.0.0.1:%d" % net.free_port()
        data = base_config(cam.url, str(tmp_path / "cache"), frame_size=[64, 96], trainer={"frames": 5},
                           cluster={"trainer": address, "workers": ["127.0.0.1:1", "127.0.0.1:2"]})
        path = write_config(str(tmp_path / "t.yml"), data)
        cfg = config.load(path)
        log = str(tmp_path / "trainer.log")
        proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "trainer", "-c", path], env=env(), cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        try:
            assert net.wait_healthy(address, 300, alive=lambda: proc.poll() is None), open(log).read()[-3000:]
            with grpc.insecure_channel(address) as chan:
                stub = pb_grpc.TrainerStub(chan)
                s = master_settings(cfg, trainer=True)
                req = pb.PredictorRequest(settings=s)
                with pytest.raises(grpc.RpcError) as err:
                    stub.GetPredictors(req, timeout=30)
                assert err.value.code() == grpc.StatusCode.NOT_FOUND

                def frames(n, h=64, w=96, size=None):
                    for i in range(n):
                        rgb = np.full((abs(h), abs(w), 3), 10 * i, dtype=np.uint8).tobytes()
                        yield pb.TrainingFrame(settings=s if i == 0 else None, height=h, width=w,
                                               rgb=rgb[:size] if size else rgb)

                for bad in (frames(3), frames(5, h=32), frames(5, size=100), frames(6), frames(5, h=-64, w=-96)):
                    with pytest.raises(grpc.RpcError) as err:
                        stub.PutFrames(bad, timeout=30)
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
                status = stub.PutFrames(frames(5), timeout=30)
                assert status.frames_total == 5
                got = stub.GetPredictors(req, timeout=120)
                assert got.arrays and not got.cached
        finally:
            stop_procs([proc])
        assert cam.connections == 0
    assert "master's 5 frames" in open(log).read()
