"""The multi-arch build's parts that need no engine: scripts/image_arch.py rewrites a saved image's
architecture (new config digest, manifest follows, layers untouched), and scripts/build_multiarch.sh
refuses a missing qemu, an unknown architecture and a registry that is down with the fix in one line."""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def saved_image(arch: str = "amd64") -> bytes:
    """A minimal `docker save` tarball: manifest.json, one config, one layer."""
    config = json.dumps({"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:ab"]}})
    config_name = hashlib.sha256(config.encode()).hexdigest() + ".json"
    files = {"manifest.json": json.dumps([{"Config": config_name, "RepoTags": ["x/base:arm64"],
                                           "Layers": ["ab/layer.tar"]}]),
             config_name: config, "ab/layer.tar": "layer bytes", "repositories": "{}"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def members(data: bytes) -> dict:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("args, want", [(["arm64"], {"architecture": "arm64"}),
                                        (["arm", "v7"], {"architecture": "arm", "variant": "v7"})])
def test_image_arch_rewrites_config_and_manifest(args, want):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "image_arch.py")] + args, input=saved_image(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    out = members(proc.stdout)
    manifest = json.loads(out["manifest.json"])
    config_name = manifest[0]["Config"]
    config = out[config_name]
    assert hashlib.sha256(config).hexdigest() + ".json" == config_name  # the id is the new config's digest
    assert {k: json.loads(config).get(k) for k in want} == want
    assert out["ab/layer.tar"] == b"layer bytes" and manifest[0]["RepoTags"] == ["x/base:arm64"]
    assert len([n for n in out if n.endswith(".json") and n != "manifest.json"]) == 1


def test_image_arch_rejects_an_unknown_architecture():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "image_arch.py"), "arm65"], input=b"",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.returncode == 2 and b"usage" in proc.stderr


def build_multiarch(*args, **env):
    environ = dict(os.environ, CNNVIDEO_INSTALL="0", **env)
    return subprocess.run(["bash", str(ROOT / "scripts" / "build_multiarch.sh")] + list(args), env=environ,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def test_missing_qemu_names_the_packages_to_install(tmp_path):
    """No binfmt handler for aarch64 (an empty binfmt_misc dir stands for a host without qemu)."""
    proc = build_multiarch("--arch", "amd64,arm64", "--no-push", CNNVIDEO_BINFMT_DIR=str(tmp_path))
    assert proc.returncode == 1
    assert "no qemu handler for arm64" in proc.stderr
    assert "apt-get install qemu-user-static binfmt-support" in proc.stderr


def test_handler_without_the_F_flag_is_refused(tmp_path):
    """A handler registered without F cannot serve containers: the message says which qemu to use."""
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: P\n")
    proc = build_multiarch("--arch", "arm64", "--no-push", CNNVIDEO_BINFMT_DIR=str(tmp_path))
    assert proc.returncode == 1 and "lacks the F flag" in proc.stderr


def test_unknown_architecture_is_refused():
    proc = build_multiarch("--arch", "amd64,mips")
    assert proc.returncode == 1 and "'mips' is not amd64 or arm64" in proc.stderr


def test_registry_that_is_down_is_named(tmp_path):
    """A registry that is not this script's own local one and does not answer: stop before building."""
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /x\nflags: PF\n")
    proc = build_multiarch("--arch", "amd64", "--registry", "127.0.0.2:5999", CNNVIDEO_BINFMT_DIR=str(tmp_path))
    assert proc.returncode == 1
    assert "registry 127.0.0.2:5999 does not answer" in proc.stderr


def wheel_stop(log: str) -> subprocess.CompletedProcess:
    script = f'. "{ROOT}/scripts/build_multiarch.sh"; set +e; wheel_stop "$1"'
    return subprocess.run(["bash", "-c", script, "wheel_stop", log], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def test_armhf_wheel_stop_is_found_in_a_coloured_build_log():
    """The classic builder wraps a step's stderr in colour escapes: the expected stop at the armv7l torch
    wheels must still be recognised (it was not, and the script died instead of reporting how far it got),
    while any other failure is not taken for it."""
    log = ("Step 16/49 : RUN for w in ...\n\x1b[91merror: no torch-1.7.0a0-cp37-cp37m-linux_armv7l.whl: put it in "
           "docker/wheels-armv7l/ or pass --build-arg TORCH_WHEELS_URL=URL\n\x1b[0mThe command returned 1")
    found = wheel_stop(log)
    assert found.returncode == 0
    assert found.stdout.strip().startswith("error: no torch-1.7.0a0-cp37-cp37m-linux_armv7l.whl")
    assert wheel_stop("E: Unable to locate package python3-scipy\nThe command returned 100").returncode == 1
