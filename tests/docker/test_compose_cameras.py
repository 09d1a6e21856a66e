"""Two cameras on the compose cluster (issue 35): scripts/compose_workers.py's several-camera project, one master
service per camera (master-door plays the image's vtest.avi, master-yard a synthetic clip mounted from tmp_path with
--media) on one trainer and two capped workers, every path of each master shaped by the netem helper, and the
one-shot report service writing the combined report once both masters exited 0. Each camera completes every frame
with nothing lost, in its own folder with its own report naming it; the combined report lists both.

Run as the docs say: `up --attach-dependencies --exit-code-from report report` (the first master to end must not
stop the other, as `--exit-code-from master` would), then `down`."""
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import yaml
from dockerutil import REPO, docker, one_replica_each, shaped_peers

sys.path.insert(0, str(REPO / "scripts"))
import compose_workers  # noqa: E402

# serial: the netem helper shapes each master once it sees its container start; beside the docker tier's other
# clusters a master once finished its frames before the helper's rescan logged it (a CI rehearsal)
pytestmark = [pytest.mark.docker, pytest.mark.serial]
N = 2
FRAMES = 24  # long enough for the helper to shape each master while it runs
RATE = 3.0  # MB/s into every worker and into the masters
CAPS = 0.5
CONFIG = "cameras.yml"
CAMERAS = {"door": "/usr/share/cnnvideo/vtest.avi", "yard": compose_workers.MEDIA + "/yard.avi"}
def write_project(tmp_path, clip):
    """The generated two-camera compose file (roles reading tmp_path/configs), its cluster config and one config per
    camera; the yard's clip in tmp_path/media, mounted at /app/media in the trainer and the masters."""
    media = tmp_path / "media"
    media.mkdir()
    media.chmod(0o755)  # the roles run as uid 10001
    shutil.copy(clip, str(media / "yard.avi"))
    (media / "yard.avi").chmod(0o644)
    cluster = yaml.safe_load((REPO / "configs" / "compose.yml").read_text())
    del cluster["video"], cluster["events"]["camera"]  # each camera names its own
    # the plumbing, not the figures: random AlexNet on small frames keeps the cold start and the run short
    cluster.update(model="alexnet", weights="random", fallback=[], frame_size=[96, 128], frames=FRAMES, in_flight=2,
                   scheduler="lbs", trainer={"frames": 10},
                   cameras={name: {"video": video} for name, video in CAMERAS.items()})
    compose, cfg, files = compose_workers.build_cameras(N, RATE, CAPS, cluster, config_name=CONFIG, media=str(media))
    configs = tmp_path / "configs"
    configs.mkdir()
    configs.chmod(0o755)
    (configs / CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))
    for file_name, mapping in files.values():
        (configs / file_name).write_text(yaml.safe_dump(mapping, sort_keys=False))
    for svc in compose["services"].values():
        svc["volumes"] = [str(configs) + ":/app/configs:ro" if v.startswith("./configs:") else v
                          for v in svc.get("volumes", [])]
    path = tmp_path / "docker-compose.cameras.yml"
    with open(str(path), "w") as fh:
        compose_workers.dump_compose(compose, fh)
    return path


def test_two_cameras_each_complete_on_one_pool_with_a_combined_report(wheels_present, tmp_path, synthetic_video):
    project = "cnnvideo-cams-%s" % uuid.uuid4().hex[:8]
    out = tmp_path / "out"
    env = dict(os.environ, OUT_DIR=str(out), FRAMES=str(FRAMES), COMPOSE_PROJECT_NAME=project)
    compose = ["docker", "compose", "-p", project, "--project-directory", str(REPO), "-f",
               str(write_project(tmp_path, synthetic_video))]
    masters = ["master-%s" % name for name in CAMERAS]
    t0 = time.time()
    try:
        proc = subprocess.run(compose + ["up", "--build", "--attach-dependencies", "--exit-code-from", "report",
                                         "report"], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=1200)
        wall = time.time() - t0
        logs = "\n".join(line for line in proc.stdout.splitlines()
                         if line.startswith(tuple(m + "-1" for m in masters) + ("report-1",)))
        assert proc.returncode == 0, "the masters' and the report's log:\n%s\n\nthe end of the run:\n%s" % (
            logs[-6000:], proc.stdout[-3000:])

        # each camera: its own folder and report, every frame completed, nothing lost
        for name in CAMERAS:
            report = json.loads((out / name / "report.json").read_text())
            assert report["camera"] == name, report.get("camera")
            assert report["frames"] == FRAMES and report["completed"] == FRAMES and report["lost"] == 0, \
                {k: report.get(k) for k in ("camera", "frames", "completed", "lost")}
            assert (out / name / "results.jsonl").is_file()
        combined = json.loads((out / "report.json").read_text())
        assert sorted(combined["cameras"]) == sorted(CAMERAS) and combined["workers"] == N, combined
        for name, cam in combined["cameras"].items():
            assert cam["status"] == "completed" and cam["completed"] == FRAMES and cam["lost"] == 0, (name, cam)

        # every master under the master's cap (MASTER_CPUS)
        cap = float(env.get("MASTER_CPUS") or compose_workers.read_env(str(REPO / ".env")).get("MASTER_CPUS", 1.0))
        for name in masters:
            ids = docker("ps", "-aq", "--filter", "label=com.docker.compose.project=" + project,
                         "--filter", "label=com.docker.compose.service=" + name).split()
            assert len(ids) == 1, (name, ids)
            nano = int(docker("inspect", "-f", "{{.HostConfig.NanoCpus}}", ids[0]).strip())
            assert nano == int(cap * 1e9), (name, nano)

        # each master's paths shaped as the one master's are: into every worker, and back from every worker
        seen = shaped_peers(proc.stdout)
        workers = ["worker%d" % i for i in range(N)]
        want = {m: {w: RATE for w in workers} for m in masters}
        want.update({w: dict({v: RATE for v in workers if v != w}, **{m: RATE for m in masters}) for w in workers})
        for src, peers in one_replica_each(want).items():
            assert peers in seen.get(src, []), "netem never shaped %s's egress to %s; it logged %s" % (
                src, sorted(peers), seen.get(src))
        print("\ncameras: %s, total %.2f fps on %d workers; compose up to the report's exit %.0f s" % (
            ", ".join("%s %s/%s at %s fps (share %s)" % (n, c["completed"], c["frames"], c["fps"], c["share"])
                      for n, c in combined["cameras"].items()), combined["total_fps"], N, wall))
    finally:
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
