"""The README's "Your own camera", followed literally: its YAML block, pointed at a camera that serves one client
(ffmpeg `-listen 1`) on the host's 127.0.0.1, and its command exactly as written (`./cnnvideo local -c camera.yml
--out out/camera`, the files placed in a temporary folder), as root with the default links."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from .helpers import REPO, env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from streams import FfmpegStream, free_port  # noqa: E402

VTEST = os.path.join(REPO, "media", "vtest.avi")


def readme_camera_section():
    """(the YAML block, the shell command) of README.md's "Your own camera" section."""
    with open(os.path.join(REPO, "README.md")) as fh:
        text = fh.read()
    section = text.split("## Your own camera", 1)[1].split("\n## ", 1)[0]
    config = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    command = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip()
    return config, command


def test_readme_section_is_a_valid_config_and_one_command():
    """The block parses as a config every key of which is known (config.load refuses unknown keys), and the
    command runs `cnnvideo local` through the repo's wrapper with that file."""
    from cnnvideo import config as config_mod

    text, command = readme_camera_section()
    data = yaml.safe_load(text)
    assert data["video"] and data["live_view"]["port"]
    assert shlex.split(command)[:4] == ["./cnnvideo", "local", "-c", "camera.yml"]
    cfg = config_mod.from_dict(data, check_files=False)
    assert cfg.live_view.port == data["live_view"]["port"] and cfg.frames == 0


@pytest.mark.slow
def test_readme_camera_block_runs_as_written(tmp_path, person_detector):
    """The README's camera config with its `video` pointed at a one-client MJPEG stream on the host's 127.0.0.1
    and the README's command run as written, as root with the default links (tc namespaces here): the live page
    answers during the run, the camera is opened once (the trainer fits on the master's frames), and after Ctrl-C
    (SIGINT) the run drains, reports and exits 0."""
    if not os.path.isfile(VTEST):
        pytest.skip("media/vtest.avi is absent (make video)")
    if not os.path.isfile(os.path.join(REPO, ".venv", "bin", "cnnvideo")):
        pytest.skip("no .venv/bin/cnnvideo: the README's ./cnnvideo needs `make setup`")
    text, command = readme_camera_section()
    data = yaml.safe_load(text)
    port = data["live_view"]["port"]
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1)
        port = free_port()  # the README's port is taken on this machine: the test only moves the page
    except OSError:
        pass
    with FfmpegStream(VTEST) as stream:
        lines = []
        for line in text.splitlines():
            if line.startswith("video:"):
                line = "video: %s" % stream.url
            elif line.startswith("live_view:"):
                line = "live_view: {port: %d}" % port
            lines.append(line)
        with open(str(tmp_path / "camera.yml"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
        argv = [os.path.join(REPO, "cnnvideo") if a == "./cnnvideo" else
                str(tmp_path / "camera.yml") if a == "camera.yml" else
                str(tmp_path / a) if a.startswith("out/") else a for a in shlex.split(command)]
        proc = subprocess.Popen(argv, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        state, deadline = None, time.time() + 600
        try:
            while time.time() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/state.json" % port, timeout=5) as resp:
                        state = json.loads(resp.read())
                    if (state.get("processed") or 0) >= 6:
                        break
                except OSError:
                    pass
                time.sleep(2)
            assert state and (state.get("processed") or 0) >= 6, "the live page never showed 6 processed frames"
            with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as resp:
                page = resp.read().decode()
            proc.send_signal(signal.SIGINT)
            log, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, log[-4000:]
    assert "<html" in page.lower()
    with open(str(tmp_path / "out" / "camera" / "report.json")) as fh:
        report = json.load(fh)
    assert report["completed"] >= 6 and report["lost"] == 0
    assert report["source"]["kind"] == "stream" and report["source"]["to_trainer"] > 0
    assert report["link_emulation"] == "tc" or os.geteuid() != 0
    assert "cannot open stream" not in log
