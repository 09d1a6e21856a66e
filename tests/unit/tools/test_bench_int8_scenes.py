"""`cnnvideo bench int8-scenes --rows`: row names that hold a comma are selected with ';', a comma list still
works for names without one, and a name that is no row is refused instead of running nothing."""
import pytest

from cnnvideo.tools.bench import int8_scenes


def test_int8_rows_split_at_semicolons_keep_names_with_commas():
    """';' selects rows whose names hold a comma ("camera, 8 frames"), in the bench's order."""
    rows = int8_scenes._rows(True, "camera, 8 frames; after")
    assert [r["name"] for r in rows] == ["after", "camera, 8 frames"]


def test_int8_rows_comma_list_and_all():
    """Without ';' the list splits at commas; an empty list is every row, the before and after rows first."""
    assert [r["name"] for r in int8_scenes._rows(True, "before,after")] == ["before", "after"]
    every = int8_scenes._rows(True, "")
    assert [r["name"] for r in every[:2]] == ["before", "after"] and len(every) > 10


def test_int8_unknown_row_is_refused():
    """A name no row has (here: a comma name split at its comma) raises ValueError naming it."""
    with pytest.raises(ValueError, match="no such row: 8 frames"):
        int8_scenes._rows(True, "camera, 8 frames")
