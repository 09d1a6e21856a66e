#!/usr/bin/env bash
# An older commit of this repository, runnable beside the checkout, for before/after measurements on one host:
#   DIR/src   the commit's files (git archive), with media/ and build/ linked to the checkout's (video, detector);
#   DIR/pkg   the package as pyproject.toml's package-dir maps it at that commit (cnnvideo.master from
#             services/master, ...), with its gRPC stubs generated;
#   DIR/venv  an interpreter that imports DIR/pkg first and the checkout's .venv packages after it (the checkout's
#             own editable cnnvideo is not loaded: a .pth line adds a folder, and that folder's .pth files are not
#             read).
# Run the old code from DIR/src with DIR/venv/bin/python, and give it a cache_dir of its own (its cache keys and
# formats are its own). Usage: tools/probes/tree_at.sh COMMIT DIR; prints DIR/venv/bin/python.
set -euo pipefail
commit=${1:?usage: tree_at.sh COMMIT DIR}
dir=${2:?usage: tree_at.sh COMMIT DIR}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
site=$("$repo/.venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf "$dir" && mkdir -p "$dir/src" "$dir/pkg"
git -C "$repo" archive "$commit" | tar -x -C "$dir/src"
ln -s "$repo/media" "$dir/src/media"
ln -s "$repo/build" "$dir/src/build"
# package-dir of that commit: {"cnnvideo": "shared/cnnvideo", "cnnvideo.master": "services/master", ...}
"$repo/.venv/bin/python" - "$dir" <<'EOF'
import os, shutil, sys
try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib
d = sys.argv[1]
mapping = tomllib.load(open(os.path.join(d, "src", "pyproject.toml"), "rb"))["tool"]["setuptools"]["package-dir"]
for name in sorted(mapping, key=len):  # parents first
    shutil.copytree(os.path.join(d, "src", mapping[name]), os.path.join(d, "pkg", *name.split(".")),
                    dirs_exist_ok=True)
EOF
python3 -m venv --without-pip "$dir/venv"
vsite=$("$dir/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
printf '%s\n%s\n' "$dir/pkg" "$site" > "$vsite/00-tree-at.pth"
(cd "$dir/src" && "$dir/venv/bin/python" -m cnnvideo.rpc.generate >/dev/null)
"$dir/venv/bin/python" -c "import cnnvideo, os; assert cnnvideo.__file__.startswith('$dir/pkg'), cnnvideo.__file__"
echo "$dir/venv/bin/python"
