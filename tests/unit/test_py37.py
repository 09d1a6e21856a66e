"""The shared library, role code and tools keep to Python 3.7 syntax (the 32-bit Pi image runs Python 3.7)."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATHS = ["shared/cnnvideo", "services/master", "services/worker", "services/trainer", "tools"]


def test_vermin_reports_python37():
    """vermin finds nothing that needs a Python newer than 3.7 (exit 0 with --violations)."""
    vermin = shutil.which("vermin") or os.path.join(os.path.dirname(sys.executable), "vermin")
    if not os.path.exists(vermin):
        pytest.fail("vermin is not installed: pip install -e '.[dev]'")
    cmd = [vermin, "--target=3.7-", "--no-tips", "--violations", "--eval-annotations"]
    proc = subprocess.run(cmd + PATHS, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_future_annotations_everywhere():
    """Every module with annotations imports `from __future__ import annotations` (3.7 can't eval new hints)."""
    missing = []
    for base in PATHS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for name in files:
                if not name.endswith(".py") or name.endswith("_pb2.py") or name.endswith("_pb2_grpc.py"):
                    continue
                path = os.path.join(dirpath, name)
                with open(path) as fh:
                    text = fh.read()
                if "->" in text and "from __future__ import annotations" not in text:
                    missing.append(os.path.relpath(path, ROOT))
    assert not missing, missing
