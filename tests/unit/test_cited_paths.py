"""Every repository path the docs and configs cite exists: a path under a top-level folder of the repository
(`tests/unit/x.py`, `scripts/y.sh`, `tools/probes/`, `configs/z.yml`), or a top-level page such as `DESIGN.md`, in
the code spans and code blocks of README.md and docs/**/*.md, or in the comments of configs/*.yml and
shared/cnnvideo/demo.yml. Placeholders (`<name>`, `*`, `PATH`, `...`) are skipped; a `path::test` or `path:line`
suffix is not part of the path; a file the repository generates (matched by .gitignore, e.g.
`configs/compose-w4.yml`) may be cited without existing. Relative Markdown links are test_docs.py's."""
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ("shared", "services", "tools", "tests", "scripts", "configs", "docs", "docker", "proto", "experiments")
# a path starts at a known top folder not preceded by a path character (so `/usr/share/...`, `../tools/x` and URLs
# are not repository citations) and runs over path characters; `{`, `<` or `*` right after it mark a placeholder
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/[\w./-]*)([<*{$]?)" % "|".join(TOP))
PAGE = re.compile(r"(?<![\w./~$-])([A-Z][A-Z0-9_-]*\.md)\b")  # DESIGN.md, README.md: a page at the top
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMENT = re.compile(r"(?:^|\s)#(.*)$", re.M)


def cited(text):
    """The repository paths cited in `text`, placeholders skipped and trailing punctuation dropped."""
    for m in PATH.finditer(text):
        path, after = m.group(1), m.group(2)
        if after or "..." in path or "PATH" in path:
            continue
        yield path.rstrip(".,;:")
    for m in PAGE.finditer(text):
        yield m.group(1)


def generated(path):
    """True for a path .gitignore matches (a file a command writes, e.g. `configs/compose-w4.yml`)."""
    patterns = [line.strip() for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith(("#", "!"))]
    return any(fnmatch.fnmatch(path.rstrip("/"), p.strip("/")) or fnmatch.fnmatch(path, p.lstrip("/") + "*")
               for p in patterns)


def markdown_citations(text):
    """Code blocks and code spans of a Markdown page: where it names files and commands."""
    blocks = [m.group(2) for m in FENCE.finditer(text)]
    rest = FENCE.sub("", text)
    return "\n".join(blocks + CODE_SPAN.findall(rest))


def yaml_citations(text):
    """The comments of a YAML file (`# see scripts/x.sh`)."""
    return "\n".join(COMMENT.findall(text))


def sources():
    """(page, text to search) for every file whose citations are checked."""
    for page in [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md")):
        yield page, markdown_citations(page.read_text(encoding="utf-8"))
    for page in sorted((ROOT / "configs").glob("*.yml")) + [ROOT / "shared" / "cnnvideo" / "demo.yml"]:
        if page.is_file():
            yield page, yaml_citations(page.read_text(encoding="utf-8"))


def test_every_cited_repository_path_exists():
    """Each cited path names a file or folder of the repository (a generated one, e.g. build output, is not cited
    under these folders)."""
    missing = []
    for page, text in sources():
        for path in sorted(set(cited(text))):
            if not (ROOT / path).exists() and not generated(path):
                missing.append("%s: %s" % (page.relative_to(ROOT).as_posix(), path))
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("text, paths", [
    ("run `scripts/fetch_video.sh media` then `tests/unit/test_x.py::test_y`", ["scripts/fetch_video.sh",
                                                                                  "tests/unit/test_x.py"]),
    ("`docs/results/<name>/`, `configs/*.yml`, `tools/.../x.py`, `scripts/PATH`", []),
    ("`/usr/share/cnnvideo/vtest.avi`, `../tools/x.py`, `https://h/shared/y.py`, `$HOME/docs/z`", []),
    ("see shared/cnnvideo/config.py, and tools/probes/.", ["shared/cnnvideo/config.py", "tools/probes/"]),
    ("`experiments/{a,b}.yml` and `docker/x.Dockerfile:12`", ["docker/x.Dockerfile"]),
    ("# noise (see DESIGN.md), docs/README.md", ["docs/README.md", "DESIGN.md"]),
])
def test_the_path_pattern(text, paths):
    """The pattern finds paths under the top folders, drops suffixes and punctuation, skips placeholders."""
    assert list(cited(text)) == paths


def test_generated_files_are_known_by_gitignore():
    """What scripts/compose_workers.py writes is generated; a source file or a missing page is not."""
    assert generated("configs/compose-w4.yml") and generated("docker-compose.w3.yml")
    assert not generated("configs/compose.yml") and not generated("DESIGN.md") and not generated("tools/x.py")


def test_the_scan_is_not_vacuous():
    """Code spans, code blocks and YAML comments are searched, prose outside them and YAML values are not."""
    md = "prose tools/a.py\n`tools/b.py`\n```sh\nbash scripts/c.sh\n```\n"
    assert sorted(cited(markdown_citations(md))) == ["scripts/c.sh", "tools/b.py"]
    assert list(cited(yaml_citations("video: media/x.avi  # see docs/y.md\nout: tools/z\n"))) == ["docs/y.md"]
    assert sum(len(list(cited(text))) for _, text in sources()) > 50
