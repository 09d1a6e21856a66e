#!/usr/bin/env python3
"""Rewrite the platform of the image in a `docker save` tarball: stdin -> stdout.

Engine 20.10 records every `docker import` as the host's architecture, even with --platform
(outside experimental mode); an arm64 rootfs imported on amd64 then claims amd64, registries
and `docker manifest` list it wrong, and `docker run --platform linux/arm64` tries to pull.
Images built FROM the fixed base inherit its architecture (the classic builder copies it).

    docker save IMAGE | python3 scripts/image_arch.py arm64 [VARIANT] | docker load
"""
import hashlib
import io
import json
import sys
import tarfile

ARCHES = ("amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64")


def set_platform(src: tarfile.TarFile, dst: tarfile.TarFile, arch: str, variant: str = "") -> str:
    """Copy src to dst with the (single) image config's architecture/variant replaced; return the new id."""
    members = {m.name: m for m in src.getmembers()}
    manifest = json.load(src.extractfile(members["manifest.json"]))
    if len(manifest) != 1:
        raise SystemExit("image_arch: expected one image in the tarball, found %d" % len(manifest))
    old_name = manifest[0]["Config"]
    config = json.load(src.extractfile(members[old_name]))
    config["architecture"] = arch
    config.pop("variant", None)
    if variant:
        config["variant"] = variant
    data = json.dumps(config, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    manifest[0]["Config"] = digest + ".json"
    replaced = {old_name: (digest + ".json", data),
                "manifest.json": ("manifest.json", json.dumps(manifest).encode())}
    for member in src.getmembers():
        if member.name in replaced:
            name, payload = replaced[member.name]
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(payload), 0o644, member.mtime
            dst.addfile(info, io.BytesIO(payload))
        else:
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return "sha256:" + digest


def main(argv: list) -> int:
    if len(argv) not in (1, 2) or argv[0] not in ARCHES:
        sys.stderr.write("usage: image_arch.py {%s} [VARIANT] < saved.tar > fixed.tar\n" % "|".join(ARCHES))
        return 2
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|*") as stream:
        # a saved image is read twice (manifest first, then every member): buffer it in memory
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as copy:
            for member in stream:
                copy.addfile(member, stream.extractfile(member) if member.isfile() else None)
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r") as src, tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as dst:
        new_id = set_platform(src, dst, argv[0], argv[1] if len(argv) > 1 else "")
    sys.stderr.write("image_arch: %s/%s -> %s\n" % (argv[0], argv[1] if len(argv) > 1 else "", new_id[:19]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
