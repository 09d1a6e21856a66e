#!/usr/bin/env python3
"""Rewrite imports from the flat core layout (cnnvideo.codec, cnnvideo.models, ...) to the grouped one
(cnnvideo.wire.codec, cnnvideo.model.zoo, ...). Idempotent: run it on a branch made before the move, then merge.

    python3 tools/probes/relayout.py [--move] [PATHS...]

--move also `git mv`s the old modules to their new places (done once, in the commit that made the layout).
Relative imports inside shared/cnnvideo are made absolute first, so a module can move without breaking them.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

# old module (under cnnvideo.) -> new module
MOVES = {
    "models": "model.zoo",
    "graph": "model.graph",
    "pipeline": "model.loading",
    "executor": "model.executor",
    "engines": "model.engines",
    "codec": "wire.codec",
    "hop": "wire.hop",
    "protocol": "wire.protocol",
    "settings": "wire.settings",
    "tls": "wire.tls",
    "pacing": "wire.pacing",
    "profiling": "plan.profiling",
    "predict": "plan.predict",
    "costinputs": "plan.costinputs",
    "costmodel": "plan.costmodel",
    "adapt": "plan.adapt",
    "schedulers": "plan.schedulers",
    "video": "video.frames",
    "sources": "video.sources",
    "report": "results.report",
    "labels": "results.labels",
    "checking": "results.checking",
    "liveview": "results.liveview",
    "progress": "results.progress",
}
NEW_PACKAGES = ("model", "wire", "plan", "video", "results")
# `cnnvideo.video` is both an old module and a new package: leave `cnnvideo.video.<new module>` alone
NEW_MODULES = sorted({v.split(".")[1] for v in MOVES.values()} | {"engines", "schedulers"})

TOKEN = re.compile(r"\bcnnvideo\.(%s)\b(?!\.(?:%s)\b)(?![\w-])" % (
    "|".join(sorted(MOVES, key=len, reverse=True)), "|".join(NEW_MODULES)))
FROM_PKG = re.compile(r"^(\s*)from cnnvideo import (.+?)(\s*#.*)?$")
PATH_TOKEN = re.compile(r"\bshared/cnnvideo/(%s)(\.py|/)" % "|".join(sorted(MOVES, key=len, reverse=True)))


def _new(name: str) -> str:
    return MOVES.get(name, name)


def _split_from_cnnvideo(line: str) -> str:
    """`from cnnvideo import codec, config as c` -> one `from cnnvideo.<pkg> import ...` line per package."""
    m = FROM_PKG.match(line)
    if not m or "(" in m.group(2):
        return line
    indent, names, comment = m.group(1), m.group(2), m.group(3) or ""
    groups = {}
    for part in names.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, alias = part.partition(" as ")
        new = _new(name.strip())
        pkg, _, mod = new.rpartition(".")
        if not pkg:  # stays at the top
            pkg, mod = "", new
        if alias:
            item = "%s as %s" % (mod, alias.strip())
        elif mod != name.strip():
            item = "%s as %s" % (mod, name.strip())
        else:
            item = mod
        groups.setdefault(pkg, []).append(item)
    out = []
    for pkg, items in groups.items():
        src = "cnnvideo" + ("." + pkg if pkg else "")
        out.append("%sfrom %s import %s" % (indent, src, ", ".join(items)))
    out[0] += comment
    return "\n".join(out)


def _absolutise(text: str, package: str) -> str:
    """Relative imports in a module of `package` become absolute."""
    def repl(m):
        dots, mod = m.group(2), m.group(3) or ""
        base = package.split(".")
        base = base[: len(base) - len(dots) + 1]
        target = ".".join(base + ([mod] if mod else []))
        return "%sfrom %s import" % (m.group(1), target)
    return re.sub(r"^(\s*)from (\.+)([\w.]*) import", repl, text, flags=re.M)


def rewrite(path: str, package: str = "") -> bool:
    with open(path) as fh:
        text = fh.read()
    new = text
    if package and path.endswith(".py"):
        new = _absolutise(new, package)
    if path.endswith(".py"):
        new = "\n".join(_split_from_cnnvideo(line) for line in new.split("\n"))
    new = TOKEN.sub(lambda m: "cnnvideo." + _new(m.group(1)), new)
    new = PATH_TOKEN.sub(lambda m: "shared/cnnvideo/" + _new(m.group(1)).replace(".", "/") + m.group(2), new)
    if new != text:
        with open(path, "w") as fh:
            fh.write(new)
        return True
    return False


def package_of(path: str) -> str:
    """The dotted package a file under shared/cnnvideo or services/<role> belongs to ('' elsewhere)."""
    parts = os.path.normpath(path).split(os.sep)
    if "shared" in parts and parts[parts.index("shared") + 1:][:1] == ["cnnvideo"]:
        rel = parts[parts.index("shared") + 1:-1]
        return ".".join(rel)
    if "services" in parts:
        i = parts.index("services")
        if len(parts) > i + 2 and parts[i + 1] in ("master", "worker", "trainer"):
            return ".".join(["cnnvideo"] + parts[i + 1:-1])
    return ""


def move(root: str) -> None:
    core = os.path.join(root, "shared", "cnnvideo")
    for pkg in NEW_PACKAGES:
        os.makedirs(os.path.join(core, pkg), exist_ok=True)
    # `video` is a module and becomes a package: move it aside first
    if os.path.exists(os.path.join(core, "video.py")):
        subprocess.check_call(["git", "mv", "shared/cnnvideo/video.py", "shared/cnnvideo/video/frames.py"], cwd=root)
    for old, new in MOVES.items():
        if old == "video":
            continue
        dst = os.path.join("shared", "cnnvideo", *new.split("."))
        src = os.path.join("shared", "cnnvideo", old)
        if os.path.isdir(os.path.join(root, src)):
            subprocess.check_call(["git", "mv", src, dst], cwd=root)
        elif os.path.exists(os.path.join(root, src + ".py")):
            subprocess.check_call(["git", "mv", src + ".py", dst + ".py"], cwd=root)


SUFFIXES = (".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".cfg", ".txt", ".proto", "Makefile", "Dockerfile",
            "Dockerfile.arm32v7", ".ini", ".json")
SKIP_DIRS = {".git", ".venv", "build", "media", "out", "node_modules", "results", "__pycache__"}


def files(root: str):
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".venv")]
        for name in names:
            if name.endswith(SUFFIXES) and not name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield os.path.join(dirpath, name)


def main(argv) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [a for a in argv if a != "--move"]
    changed = 0
    if "--move" in argv:
        # relative imports are made absolute where each module sits before it moves
        for path in files(os.path.join(root, "shared")):
            if path.endswith(".py"):
                changed += rewrite(path, package_of(os.path.relpath(path, root)))
        move(root)
    for path in (args or list(files(root))):
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        changed += rewrite(path, package_of(os.path.relpath(path, root)) if path.endswith(".py") else "")
    print("relayout: %d files rewritten" % changed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
