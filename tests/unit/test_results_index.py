"""docs/results/README.md's index finds the current figure first: every folder under docs/results has exactly one row
in the index with a status of `current` or `superseded by [X](X/...)`; every superseded row names a folder that exists
and has a row of its own; and each superseded page (the results.md or README.md its row links to) carries a
"> Superseded by [X](../X/...)" note in its first lines, naming the same X, while no current page carries one."""
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
INDEX = RESULTS / "README.md"
FIRST_LINES = 5

# | [folder](folder/page.md) | status | command | finding |
ROW = re.compile(r"^\|\s*\[([^\]]+)\]\(([^)/\s]+)/([^)\s]+)\)\s*\|\s*([^|]*?)\s*\|")
SUPERSEDED = re.compile(r"^superseded by \[([^\]]+)\]\(([^)/\s]+)/[^)\s]+\)$")
NOTE = re.compile(r"^> Superseded by \[([^\]]+)\]\(\.\./([^)/\s]+)/[^)\s]+\): \S.*\.$")


def index_section():
    """The text of the '## Index' section (up to the next '## ' heading)."""
    text = INDEX.read_text(encoding="utf-8")
    match = re.search(r"^## Index\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, "docs/results/README.md has no '## Index' section followed by another '## ' section"
    return match.group(1)


def index_rows():
    """{folder: (linked page, status)} from the index's table rows; a folder listed twice fails."""
    rows, twice = {}, []
    for line in index_section().splitlines():
        match = ROW.match(line)
        if not match:
            continue
        text, folder, page, status = match.groups()
        assert text == folder, "row text %r links to folder %r" % (text, folder)
        if folder in rows:
            twice.append(folder)
        rows[folder] = (page, status)
    assert not twice, "folders listed more than once: %s" % ", ".join(twice)
    return rows


def folders():
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir())


def superseded_by(status):
    """The folder a status names as superseding, or None for `current`; any other status fails."""
    if status == "current":
        return None
    match = SUPERSEDED.match(status)
    assert match, "status %r is neither 'current' nor 'superseded by [X](X/...)'" % status
    assert match.group(1) == match.group(2), "status %r: link text and folder differ" % status
    return match.group(2)


def test_every_results_folder_is_in_the_index_with_a_status():
    """Each folder under docs/results has a row whose link names an existing page in it and whose status is valid."""
    rows = index_rows()
    missing = [f for f in folders() if f not in rows]
    assert not missing, "folders not in docs/results/README.md's index: %s" % ", ".join(missing)
    unknown = [f for f in rows if not (RESULTS / f).is_dir()]
    assert not unknown, "index rows for folders that do not exist: %s" % ", ".join(unknown)
    for folder, (page, status) in rows.items():
        assert (RESULTS / folder / page).is_file(), "%s: the index links to missing %s" % (folder, page)
        superseded_by(status)


def test_superseded_rows_point_at_listed_folders():
    """A superseded row's successor is another existing folder that has its own row in the index."""
    rows = index_rows()
    successors = {f: superseded_by(status) for f, (_, status) in rows.items()}
    assert any(successors.values()), "no superseded rows found: the status pattern matches nothing"
    for folder, successor in successors.items():
        if successor is None:
            continue
        assert successor != folder, "%s is superseded by itself" % folder
        assert (RESULTS / successor).is_dir(), "%s: superseded by missing folder %s" % (folder, successor)
        assert successor in rows, "%s: superseded by %s, which has no row in the index" % (folder, successor)


def test_superseded_pages_say_so_at_the_top():
    """Each superseded page's first lines hold '> Superseded by [X](../X/...): why.' with the index's X; current
    pages hold no such note."""
    for folder, (page, status) in index_rows().items():
        successor = superseded_by(status)
        head = (RESULTS / folder / page).read_text(encoding="utf-8").splitlines()[:FIRST_LINES]
        notes = [NOTE.match(line) for line in head if line.startswith("> Superseded by")]
        if successor is None:
            assert not notes, "%s/%s is current in the index but its first lines say it is superseded" % (
                folder, page)
            continue
        assert notes and notes[0], "%s/%s: no '> Superseded by [X](../X/...): why.' line in its first %d lines" % (
            folder, page, FIRST_LINES)
        named = notes[0].group(2)
        assert notes[0].group(1) == named, "%s/%s: the note's link text and folder differ" % (folder, page)
        assert named == successor, "%s/%s: the note names %s, the index %s" % (folder, page, named, successor)


def test_row_pattern_reads_a_row_and_a_status():
    """The row and status patterns are not vacuous: they read a sample row and both kinds of status."""
    row = "| [a-b](a-b/results.md) | superseded by [c](c/README.md) | `cmd` | finding |"
    assert ROW.match(row).groups() == ("a-b", "a-b", "results.md", "superseded by [c](c/README.md)")
    assert superseded_by("current") is None
    assert superseded_by("superseded by [c](c/README.md)") == "c"
    assert NOTE.match("> Superseded by [c](../c/results.md): the same runs after a fix.").group(2) == "c"
