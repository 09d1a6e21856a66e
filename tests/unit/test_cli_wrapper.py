"""`./cnnvideo` at the repository root runs .venv/bin/cnnvideo (the README's next command after `make demo`), and
says what to run when the venv is not there yet."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRAPPER = os.path.join(ROOT, "cnnvideo")


def test_wrapper_runs_the_venv_cli():
    if not os.access(os.path.join(ROOT, ".venv", "bin", "cnnvideo"), os.X_OK):
        pytest.skip("no .venv/bin/cnnvideo in this checkout (make setup makes it)")
    proc = subprocess.run([WRAPPER, "local", "--help"], cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: cnnvideo local") and "configs/local.yml" in proc.stdout


def test_wrapper_without_a_venv_names_make_setup(tmp_path):
    copy = str(tmp_path / "cnnvideo")
    shutil.copy(WRAPPER, copy)
    proc = subprocess.run([copy, "plan"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=30)
    assert proc.returncode == 127 and "make setup" in proc.stderr and proc.stdout == ""
