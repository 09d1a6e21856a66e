"""No package-registry host is written into the repository, and scripts/debian_mirror.sh reads the
Debian mirror from apt sources (one-line and deb822) instead."""
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "debian_mirror.sh"
# hosts of Debian/Ubuntu mirrors, PyPI, piwheels, container registries and npm
# the registry domains themselves (any subdomain ends in one): no leading `(label.)*`, whose backtracking made
# the scan of results-data's 14 MB take seconds
REGISTRY_HOSTS = re.compile(
    r"(?:debian\.org|ubuntu\.com|pypi\.org|pythonhosted\.org|piwheels\.org|"
    r"docker\.com|index\.docker\.io|registry-1\.docker\.io|ghcr\.io|quay\.io|gcr\.io|npmjs\.org|"
    r"npmjs\.com|raspberrypi\.(?:org|com))(?![a-z0-9-])|docker\.io/",
    re.IGNORECASE,
)


def tracked_text_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=str(ROOT), stdout=subprocess.PIPE, check=True).stdout
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            data = path.read_bytes()
            if b"\0" not in data[:8192]:
                yield name, data.decode("utf-8", errors="replace")


def test_no_registry_host_in_tracked_files():
    """Every tracked text file is free of registry host names: mirrors and indexes come from the host's config."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    hits = ["%s:%d: %s" % (name, i + 1, line.strip()[:120])
            for name, text in tracked_text_files()
            for i, line in enumerate(text.splitlines()) if REGISTRY_HOSTS.search(line)]
    assert not hits, "registry host names in the repository:\n" + "\n".join(hits)


def host(*labels):
    """A host name joined at run time, so this file does not itself hold one."""
    return ".".join(labels)


def test_the_pattern_catches_the_hosts_it_must():
    """The grep is not vacuous: the hosts that used to be hard-coded, and image references, match."""
    for text in ("http://%s/debian" % host("deb", "debian", "org"),
                 "ARG APT_MIRROR=http://%s/debian" % host("archive", "debian", "org"),
                 "https://%s/simple" % host("www", "piwheels", "org"), "https://%s/simple" % host("pypi", "org"),
                 "%s/library/debian" % host("docker", "io")):
        assert REGISTRY_HOSTS.search(text), text
    for text in ("apt_install docker.io iptables", "debian:bookworm-slim", "127.0.0.1:5000/cnnvideo/node",
                 'LABEL = "com.docker.compose.project"'):
        assert not REGISTRY_HOSTS.search(text), text


def mirror(tmp_path, *contents, env=None, names=None):
    files = []
    for i, text in enumerate(contents):
        path = tmp_path / (names[i] if names else "s%d.list" % i)
        path.write_text(text)
        files.append(str(path))
    environ = {k: v for k, v in os.environ.items() if k != "CNNVIDEO_DEBIAN_MIRROR"}
    environ.update(env or {})
    return subprocess.run(["bash", str(SCRIPT)] + files, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=environ)


def test_one_line_sources(tmp_path):
    """deb-src, comments, security and third-party suites are skipped; [options] are stripped."""
    proc = mirror(tmp_path, "deb-src http://src.example/debian bookworm main\n"
                            "# deb http://commented.example/debian bookworm main\n"
                            "deb http://sec.example/debian-security bookworm-security main\n"
                            "deb [arch=amd64] http://node.example/node_20.x nodistro main\n"
                            "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main contrib\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "http://mirror.example/debian"


def test_deb822_sources(tmp_path):
    """deb822 stanzas: a disabled one and the security suite are skipped; the first URI of the match wins."""
    text = ("Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
            "Types: deb deb-src\n# a comment\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n\n"
            "Types: deb\nURIs: http://mirror.example/debian\n http://second.example/debian\n"
            "Suites: bookworm bookworm-updates\nComponents: main\n")
    proc = mirror(tmp_path, text, names=["debian.sources"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "http://mirror.example/debian"


def test_override_wins(tmp_path):
    proc = mirror(tmp_path, "deb http://mirror.example/debian bookworm main\n",
                  env={"CNNVIDEO_DEBIAN_MIRROR": "http://override.example/debian/"})
    assert proc.stdout.strip() == "http://override.example/debian"


def test_no_debian_source_is_a_clear_error(tmp_path):
    """An Ubuntu-only host has no Debian mirror: exit 1 naming the override variable."""
    proc = mirror(tmp_path, "deb http://ubuntu.example/ubuntu jammy main\n")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "CNNVIDEO_DEBIAN_MIRROR" in proc.stderr
