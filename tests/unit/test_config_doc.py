"""docs/configuration.md lists exactly the keys of cnnvideo.config, with their types and defaults, and the renamed
keys; docs/report-format.md lists exactly RunReport's contract fields (and those of a hop and of latency_s)."""
import os
import re

import yaml

from cnnvideo import config, config_upgrade
from cnnvideo.results import report as rpt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ("What a user sets first", "Tuning", "Cost-model calibration")


def tables(path):
    """{heading: [[cell, ...], ...]} of every markdown table row under each ## / ### heading (header rows out)."""
    out, heading = {}, ""
    with open(os.path.join(ROOT, path)) as fh:
        for line in fh:
            m = re.match(r"^#{2,3} (.+)", line)
            if m:
                heading = m.group(1).strip()
            elif line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line.strip()):
                cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
                if cells[0] not in ("key", "field", "old key"):
                    out.setdefault(heading, []).append(cells)
    return out


def code(cell):
    """The text of a `code` cell."""
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def test_every_config_key_is_documented_and_every_documented_key_exists():
    doc = tables("docs/configuration.md")
    rows = [r for g in GROUPS for r in doc.get(g, [])]
    keys = [code(r[0]) for r in rows]
    assert len(keys) == len(set(keys)), "keys documented twice: %s" % sorted(k for k in keys if keys.count(k) > 1)
    known = [k for k, _, _ in config.key_table()]
    assert sorted(set(known) - set(keys)) == [], "config keys missing from docs/configuration.md"
    assert sorted(set(keys) - set(known)) == [], "docs/configuration.md names keys config.py does not have"


def test_documented_types_and_defaults_are_the_code_s():
    rows = {code(r[0]): r for g in GROUPS for r in tables("docs/configuration.md").get(g, [])}
    for key, type_name, default in config.key_table():
        _, doc_type, doc_default, unit, meaning = rows[key]
        assert doc_type == type_name, key
        assert yaml.safe_load(code(doc_default)) == default, (key, doc_default, default)
        assert unit and meaning, key


def test_renamed_keys_are_documented():
    renamed = tables("docs/configuration.md")["Renamed keys"]
    pairs = {(code(r[0]), code(r[1])) for r in renamed}
    for old, new in config_upgrade.RENAMED.items():
        assert (old, new) in pairs, old


def test_every_report_contract_field_is_documented_and_every_documented_field_exists():
    doc = tables("docs/report-format.md")
    fields = [code(r[0]) for r in doc["Contract fields"]]
    contract = ["schema_version"] + list(rpt._FIELDS)
    assert sorted(set(contract) - set(fields)) == [], "RunReport fields missing from docs/report-format.md"
    assert sorted(set(fields) - set(contract)) == [], "docs/report-format.md names fields RunReport does not have"
    assert len(fields) == len(set(fields))
    hop = [code(r[0]) for r in doc["hops"]]
    assert sorted(hop) == sorted(rpt.HopStats("m->w0").to_dict())
    latency = [code(r[0]) for r in doc["latency_s"]]
    assert sorted(latency) == sorted(rpt.latency_summary([1.0]))
