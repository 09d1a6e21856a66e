"""`cnnvideo local` with several cameras (config `cameras:`): one master per camera on the same trainer and workers.

Each camera's master runs a single-camera config (config.camera_configs: its video, source, zones, check_share,
`events.camera` its name, its folder <out>/<name>, its window of frames in flight scaled by its weight), so its
tracker, events, results.jsonl, report and live view are its own, and a camera that fails stops only its master.
The workers hold one run per camera (RunSetup.camera), each with its own closed-loop references on every link, so
frames of different cameras are never compared. A busy pool is shared by the cameras' windows of frames in flight:
each master keeps `in_flight` x weight / mean weight frames outstanding. With a live view, the camera grid
(tools/camera_grid.py) is on `live_view.port` and each camera's page on the ports after it.

The launcher waits for every master, then writes <out>/report.json: each camera's figures (frames, completed,
skipped, lost, fps, latency, agreement) under `cameras`, the total fps and each camera's share of it."""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from cnnvideo import cluster, config
from cnnvideo.config import ConfigError
from cnnvideo.results import report as rpt


def several(cfg: config.Config) -> bool:
    return cluster.from_config(cfg).several


def masters(cfg: config.Config) -> Dict[str, str]:
    """{camera: its master's role name} (cnnvideo.cluster: master-<camera> each with several cameras)."""
    return {camera: name for name, camera in cluster.from_config(cfg).masters()}


def check_sources(cfg: config.Config) -> Dict[str, str]:
    """Probe every camera's video (files made absolute); {name: why} of the cameras that cannot be opened now (each
    is logged as down: its master reports the same). The trainer plays the first camera that opens when
    `trainer.video` is unset. ConfigError (one line) when no camera opens."""
    from cnnvideo.video.sources import SourceError, kind_of, probe

    down: Dict[str, str] = {}
    for cam in cfg.cameras:
        name = cam.name
        if kind_of(cam.video) == "file":
            cam.video = os.path.abspath(cam.video)
        try:
            probe(cam.video)
        except SourceError as exc:
            down[name] = str(exc)
            print("[local] camera %s is down: %s" % (name, exc), file=sys.stderr, flush=True)
            continue
        if not cfg.trainer.video:
            cfg.trainer.video = cam.video
    if len(down) == len(cfg.cameras):
        raise ConfigError("config key 'cameras': every camera is down (%s)"
                          % "; ".join("%s: %s" % kv for kv in down.items()))
    return down


def master_shares(shares: Dict[str, float], cfg: config.Config) -> Dict[str, float]:
    """CPU caps with one entry per master (cnnvideo.cluster's names: master-<camera> each with several cameras), each
    at the master's share (each master its own cap)."""
    out = dict(shares)
    if "master" in out:
        share = out.pop("master")
        out.update({name: share for name in cluster.from_config(cfg).master_names()})
    return out


def write_configs(cfg: config.Config) -> List[Tuple[str, str, config.Config]]:
    """(camera name, config path, config) of each camera's master: <out>/<name>/config.yml; a live view on
    `live_view.port` + 1 + the camera's index (the camera grid is on `live_view.port`)."""
    out = []
    for i, one in enumerate(config.camera_configs(cfg)):
        name = one.events.camera
        os.makedirs(one.out, exist_ok=True)
        if one.live_view.port:
            one.live_view.port += 1 + i
        path = os.path.join(one.out, "config.yml")
        config.dump(one, path)
        for stale in ("report.json",):
            if os.path.exists(os.path.join(one.out, stale)):
                os.remove(os.path.join(one.out, stale))
        out.append((name, path, one))
    return out


def live_ports(cfg: config.Config) -> int:
    """How many ports from `live_view.port` a run's live pages use: one, or the grid's and one per camera."""
    return 1 + len(cfg.cameras) if several(cfg) else 1


def start_grid(cfg: config.Config, runs: List[Tuple[str, config.Config, Any]]):
    """The camera grid on `live_view.port` (None when the live view is off), started; each tile says whether its
    camera's master still runs."""
    if not cfg.live_view.port:
        return None
    from .camera_grid import CameraGrid

    masters = {name: master for name, _, master in runs}

    def status(name: str) -> str:
        code = masters[name].proc.poll()
        return "running" if code is None else "exited %d" % code

    grid = CameraGrid(cfg.live_view.port, [(name, one.live_view.port) for name, one, _ in runs],
                      cfg.live_view.host, token=config.view_token(cfg), status=status)
    grid.start()
    print("[local] camera grid on http://%s:%d/ (each camera's page on the next ports)"
          % (cfg.live_view.host, cfg.live_view.port), file=sys.stderr, flush=True)
    return grid


def restarts_master(code: int, rel, restarts: int, stopping: bool) -> bool:
    """Whether a master that exited with `code` is started again: one killed by a signal starts a new run, while it
    has restarts left; one that exits with an error is not (its camera is down). Never once the launcher was asked
    to stop: the run is over, however the master ended (a new one would run on with nobody to stop it)."""
    return code < 0 and not stopping and rel is not None and rel.restart and restarts < rel.max_restarts


def wait_masters(masters: List[Any], others: List[Any], rel, supervise, grace: float = 20.0,
                 stopping: Callable[[], bool] = lambda: False) -> Dict[str, int]:
    """Wait for every camera's master ({name: exit code}), restarting crashed roles like the single-camera wait
    (restarts_master). If a shared role stays dead for `grace` s, the masters still running are stopped."""
    codes: Dict[str, int] = {}
    died_at: Optional[float] = None
    while len(codes) < len(masters):
        for m in masters:
            if m.name in codes:
                continue
            code = m.proc.poll()
            if code is None:
                continue
            if restarts_master(code, rel, m.restarts, stopping()):
                supervise([m], rel)
                continue
            codes[m.name] = code
        if len(codes) == len(masters):
            break
        if rel is not None:
            supervise(others, rel)
        dead = [c for c in others if not c.alive()]
        died_at = (died_at or time.time()) if dead else None
        if died_at is not None and time.time() - died_at > grace:
            print("cnnvideo local: error: %s exited (code %s) and the masters did not stop; stopping them"
                  % (dead[0].name, dead[0].proc.returncode), file=sys.stderr, flush=True)
            for m in masters:
                if m.name not in codes:
                    m.stop()
                    codes[m.name] = 1
            break
        time.sleep(0.5)
    return codes


def camera_entry(report: Optional[Dict[str, Any]], code: int, master_log: List[str], path: str) -> Dict[str, Any]:
    """One camera's section of the combined report: its own report's figures, or why it is down."""
    if report is None:
        errors = [ln for ln in master_log if "error" in ln.lower()]
        return {"status": "down", "exit_code": code, "error": (errors or master_log or ["no report"])[-1]}
    det = report.get("detection_agreement") or {}
    lat = report.get("latency_s") or {}
    return {
        "status": "completed" if code == 0 else "failed", "exit_code": code,
        "frames": report.get("frames"), "completed": report.get("completed"), "lost": report.get("lost"),
        "dropped": report.get("dropped"), "skipped": report.get("skipped"),
        "outages": (report.get("source") or {}).get("outages"),
        "outage_s": (report.get("source") or {}).get("outage_s"),
        "missed_frames": (report.get("source") or {}).get("missed_frames"),
        "fps": report.get("throughput_fps"), "wall_s": report.get("wall_s"),
        "latency_p50_s": lat.get("p50"), "latency_p95_s": lat.get("p95"),
        "max_abs_err": report.get("max_abs_err"), "f1": det.get("f1"),
        "top1_agreement": report.get("top1_agreement"), "error": report.get("error"),
        "report": path,
    }


def combined_report(cfg: config.Config, runs: List[Tuple[str, config.Config, Any]], codes: Dict[str, int],
                    extra: Dict[str, Any]) -> Dict[str, Any]:
    """<out>/report.json of a several-camera run: every camera's section, the total fps, each camera's share."""
    cameras: Dict[str, Any] = {}
    for name, one, master in runs:
        path = os.path.join(one.out, "report.json")
        report = None
        if os.path.isfile(path):
            report = rpt.read(path)
            if extra:
                for key, value in extra.items():
                    report[key] = value
                rpt.write_json(report, path)
        entry = camera_entry(report, codes.get(master.name, 1), master.lines, path)
        entry["weight"] = cfg.camera(name).weight
        cameras[name] = entry
    total = sum(float(c.get("fps") or 0.0) for c in cameras.values())
    for c in cameras.values():
        c["share"] = round(float(c.get("fps") or 0.0) / total, 4) if total > 0 else None
    return {"cameras": cameras, "total_fps": round(total, 3), "model": cfg.model, "scheduler": cfg.scheduler,
            "workers": len(cfg.cluster.workers), **extra}


def summary(combined: Dict[str, Any]) -> str:
    lines = ["", "%-10s %-10s %9s %6s %6s %8s %7s %7s %6s" % ("camera", "status", "completed", "lost", "skip",
                                                           "fps", "share", "p95 s", "F1")]
    for name, c in combined["cameras"].items():
        lines.append("%-10s %-10s %9s %6s %6s %8s %7s %7s %6s" % (
            name, c["status"], "%s/%s" % (c.get("completed"), c.get("frames")), c.get("lost"), c.get("skipped"),
            c.get("fps"), c.get("share"), c.get("latency_p95_s"), c.get("f1")))
        if c["status"] != "completed" and c.get("error"):
            lines.append("           %s" % c["error"])
    lines.append("total fps %s on %d workers (%s)" % (combined["total_fps"], combined["workers"],
                                                      combined["scheduler"]))
    return "\n".join(lines)


def exit_code(combined: Dict[str, Any], prog: str = "cnnvideo local") -> int:
    """0 when every camera that ran completed every frame (a camera down from the start is reported, not an error,
    while another camera runs); 1 otherwise, with one line that `prog` says."""
    cams = combined["cameras"]
    ran = {n: c for n, c in cams.items() if c["status"] != "down"}
    if not ran:
        print("%s: error: every camera is down (%s)" % (prog, "; ".join(
            "%s: %s" % (n, c.get("error")) for n, c in cams.items())), file=sys.stderr)
        return 1
    bad = [n for n, c in ran.items() if c["status"] != "completed" or c.get("completed") != c.get("frames")
           or c.get("lost")]
    if bad:
        print("%s: not every frame completed on camera %s" % (prog, ", ".join(bad)), file=sys.stderr)
        return 1
    return 0


__all__ = ["several", "masters", "live_ports", "start_grid", "check_sources", "master_shares", "write_configs",
           "wait_masters", "combined_report", "summary", "exit_code"]
