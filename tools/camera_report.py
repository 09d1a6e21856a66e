"""The combined report of a several-camera run whose masters ran on their own (the compose cluster's `master-<camera>`
services, scripts/compose_workers.py): <out>/report.json from each camera's <out>/<camera>/report.json, the same
sections, total fps and shares as `cnnvideo local` writes (tools/local_cameras.py's combined_report), its summary
table on stdout, exit 0 when every camera completed every frame with nothing lost.

    python3 -m cnnvideo.tools.camera_report -c CLUSTER.yml [--out DIR]

CLUSTER.yml is the config that lists the cameras (what the trainer and workers read); --out is the folder holding the
cameras' folders (default: the config's `out`). A camera whose report is missing is `down` ("no report"). Each
camera's master is taken to have exited 0 (the compose `report` service starts only then), so a camera with a report
is `completed` when it completed every frame, else the exit code says which camera did not."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, NamedTuple, Optional

from cnnvideo import config
from cnnvideo.config import ConfigError
from cnnvideo.results import report as rpt

from . import local_cameras


class Master(NamedTuple):
    """What combined_report reads of a camera's master: its name and log lines (none here: its log is compose's)."""

    name: str
    lines: List[str]


def combined(cfg: config.Config, out: str) -> Dict[str, Any]:
    """The combined report of `cfg`'s cameras whose reports are in out/<camera>/report.json."""
    cfg.out = out
    names = local_cameras.masters(cfg)  # the cluster description's master of each camera
    runs = [(one.events.camera, one, Master(names[one.events.camera], [])) for one in config.camera_configs(cfg)]
    codes = {m.name: 0 for _, _, m in runs}  # a master that exited non-zero stopped the compose run before this
    return local_cameras.combined_report(cfg, runs, codes, {})


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m cnnvideo.tools.camera_report", description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--config", required=True, help="the cluster config that lists the cameras")
    ap.add_argument("--out", default=None, help="folder of the cameras' folders (default: the config's out)")
    args = ap.parse_args(argv)
    try:
        cfg = config.load(args.config, check_files=False)  # the cameras' files are their masters' business
    except ConfigError as exc:
        print("camera_report: error: %s" % exc, file=sys.stderr)
        return 2
    if not local_cameras.several(cfg):
        print("camera_report: error: config key 'cameras': %s lists %d camera(s); a single camera's report is its "
              "master's own" % (args.config, len(cfg.cameras)), file=sys.stderr)
        return 2
    report = combined(cfg, os.path.abspath(args.out or cfg.out))
    path = rpt.write_json(report, os.path.join(cfg.out, "report.json"))
    print(local_cameras.summary(report), flush=True)
    print("report: %s  per camera: %s" % (path, ", ".join(os.path.join(cfg.out, name, "report.json")
                                                          for name in report["cameras"])), flush=True)
    return local_cameras.exit_code(report, prog="camera_report")


if __name__ == "__main__":
    sys.exit(main())
