"""The documentation holds together: the README stays short and names the test command, and every relative link
in README.md and docs/**/*.md points at a file that exists."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_WORDS = 1500

# [text](target) and ![alt](target), with an optional "title"; the target ends at whitespace or ')'
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files():
    return [README] + sorted((ROOT / "docs").rglob("*.md"))


def relative_links(path):
    """The relative link targets of a Markdown file (code blocks and code spans are not links)."""
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    for target in LINK.findall(text):
        if re.match(r"^(https?:|mailto:)", target, re.I):
            continue
        yield target


def test_readme_is_at_most_1500_words():
    """README.md has at most 1,500 words, counted like `wc -w` (runs of non-whitespace)."""
    words = len(README.read_text(encoding="utf-8").split())
    assert words <= MAX_README_WORDS, "README.md has %d words (at most %d)" % (words, MAX_README_WORDS)


def test_every_relative_link_resolves_to_an_existing_file():
    """Every relative link in README.md and docs/**/*.md, anchor stripped, names an existing file; http(s) and
    mailto links are not checked, and a bare '#anchor' points into the page itself."""
    broken = []
    for page in markdown_files():
        for target in relative_links(page):
            path = target.split("#", 1)[0]
            if not path:
                continue  # '#anchor': the same page
            resolved = (page.parent / path).resolve()
            if resolved.is_file():
                continue
            broken.append("%s: %s" % (page.relative_to(ROOT).as_posix(), target))
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_link_pattern_finds_links_and_skips_code():
    """The link check is not vacuous: it finds plain, image and titled links and skips code and web links."""
    sample = ROOT / "docs" / "architecture.md"
    found = list(relative_links(sample))
    assert found, "no relative links found in docs/architecture.md"
    text = '[a](x.md) ![b](img/y.svg) [c](z.md#part "t") `[d](code.md)` [e](https://example.com) [f](#local)'
    targets = LINK.findall(CODE_SPAN.sub("", text))
    assert targets == ["x.md", "img/y.svg", "z.md#part", "https://example.com", "#local"]


def test_readme_names_the_test_command():
    """The README tells a reader to run the test suite with `make test` (the command CI's .ci/run calls)."""
    assert "make test" in README.read_text(encoding="utf-8")
