"""Generate the gRPC stubs (cnnvideo_pb2*.py) from proto/cnnvideo.proto into this package."""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from typing import List, Optional

log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = ("cnnvideo_pb2.py", "cnnvideo_pb2_grpc.py")


class GenerateError(RuntimeError):
    """The stubs could not be generated (no proto file or no grpcio-tools)."""


def find_proto() -> Optional[str]:
    """The proto file: $CNNVIDEO_PROTO, else proto/ at the repository root (editable install), else cwd."""
    candidates = [
        os.environ.get("CNNVIDEO_PROTO", ""),
        os.path.join(HERE, "..", "..", "..", "proto", "cnnvideo.proto"),
        os.path.join(os.getcwd(), "proto", "cnnvideo.proto"),
    ]
    for path in candidates:
        if path and os.path.isfile(path):
            return os.path.abspath(path)
    return None


def stubs_present(out_dir: str = HERE) -> bool:
    return all(os.path.isfile(os.path.join(out_dir, name)) for name in STUBS)


def stubs_stale(proto: Optional[str], out_dir: str = HERE) -> bool:
    """True if stubs are missing or older than the proto file."""
    if not stubs_present(out_dir):
        return True
    if proto is None:
        return False
    mtime = os.path.getmtime(proto)
    return any(os.path.getmtime(os.path.join(out_dir, name)) < mtime for name in STUBS)


def generate(proto: Optional[str] = None, out_dir: str = HERE) -> List[str]:
    """Run protoc (grpcio-tools) so that `from cnnvideo.rpc import cnnvideo_pb2` works; atomic per file."""
    proto = proto or find_proto()
    if proto is None:
        raise GenerateError("proto/cnnvideo.proto not found (set CNNVIDEO_PROTO to its path)")
    try:
        from grpc_tools import protoc
    except ImportError:
        raise GenerateError("grpcio-tools is not installed: pip install grpcio-tools") from None
    tmp = tempfile.mkdtemp(prefix="cnnvideo-proto-")
    try:
        src_root = os.path.join(tmp, "src")
        gen_root = os.path.join(tmp, "gen")
        os.makedirs(os.path.join(src_root, "cnnvideo", "rpc"))
        os.makedirs(gen_root)
        # the proto sits at cnnvideo/rpc/ in the include tree, so generated imports say `from cnnvideo.rpc import`
        shutil.copyfile(proto, os.path.join(src_root, "cnnvideo", "rpc", "cnnvideo.proto"))
        argv = [
            "grpc_tools.protoc",
            "-I" + src_root,
            "-I" + _well_known_include(),
            "--python_out=" + gen_root,
            "--grpc_python_out=" + gen_root,
            os.path.join("cnnvideo", "rpc", "cnnvideo.proto"),
        ]
        code = protoc.main(argv)
        if code != 0:
            raise GenerateError("protoc failed (exit %d) on %s" % (code, proto))
        written = []
        os.makedirs(out_dir, exist_ok=True)
        for name in STUBS:
            tmp_target = os.path.join(out_dir, ".%s.%d.tmp" % (name, os.getpid()))
            shutil.copyfile(os.path.join(gen_root, "cnnvideo", "rpc", name), tmp_target)
            os.replace(tmp_target, os.path.join(out_dir, name))
            written.append(os.path.join(out_dir, name))
        log.debug("generated %s from %s", ", ".join(written), proto)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(quiet: bool = True) -> bool:
    """Generate the stubs if missing or stale and possible; True if stubs are present afterwards."""
    proto = find_proto()
    if stubs_stale(proto):
        try:
            generate(proto)
        except GenerateError as exc:
            if not quiet:
                raise
            log.warning("cannot generate gRPC stubs: %s", exc)
        except OSError as exc:  # read-only install: keep whatever stubs exist
            log.warning("cannot write gRPC stubs: %s", exc)
    return stubs_present()


def _well_known_include() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cnnvideo.rpc.generate", description=__doc__)
    parser.add_argument("--proto", default=None, help="path to cnnvideo.proto (default: found automatically)")
    parser.add_argument("--out", default=HERE, help="output folder (default: the cnnvideo.rpc package)")
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args(argv)
    proto = args.proto or find_proto()
    if not args.force and not stubs_stale(proto, args.out):
        print("gRPC stubs up to date in %s" % args.out)
        return 0
    try:
        written = generate(proto, args.out)
    except GenerateError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    print("generated %s" % " ".join(written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
