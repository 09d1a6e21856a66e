"""A real headless browser for tests: Debian's chromium dumps a page's DOM after its scripts ran."""
from __future__ import annotations

import shutil
import subprocess
import tempfile

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def chromium() -> str:
    """Path of chromium (apt-get install chromium), else RuntimeError."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("chromium is not installed (apt-get install chromium)")


def dump_dom(url: str, budget_ms: int = 4000, timeout: float = 90.0) -> str:
    """The DOM of `url` after `budget_ms` of (virtual) time, from a fresh profile."""
    with tempfile.TemporaryDirectory(prefix="cnnvideo-chromium-") as profile:
        argv = [chromium()] + FLAGS + ["--user-data-dir=%s" % profile, "--virtual-time-budget=%d" % budget_ms,
                                       "--dump-dom", url]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError("chromium failed (%d): %s" % (proc.returncode, proc.stderr[-2000:]))
    return proc.stdout
