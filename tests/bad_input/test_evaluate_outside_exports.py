"""`crossmod evaluate ckpt=<export>` writes its report outside the export: an exported folder may be a shared, read-only
copy that others load, so nothing is written into it, not even when `out=` points there (or there through a link)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossmod.results.evaluate import report_folder
from crossmod.runtime.user_errors import UserError


def _export(root: Path) -> Path:
    for culture in ("US", "DE"):
        (root / "export" / culture).mkdir(parents=True)
        (root / "export" / culture / "culture_card.json").write_text(json.dumps({"culture": culture, "run": "../../../etc"}))
    return root / "export"


def test_an_exports_report_goes_under_the_working_directory_named_by_the_folders_not_the_card(tmp_path):
    exports, cwd = _export(tmp_path / "shared"), tmp_path / "work"
    assert report_folder(None, exports / "US", "mhc", "auto", cwd) == cwd / "evaluations" / "export" / "US" / "report-mhc-auto"
    assert report_folder(None, exports, "mhc", "all", cwd) == cwd / "evaluations" / "shared" / "export" / "report-mhc-all"


def test_a_run_keeps_its_report_beside_it(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    assert report_folder(None, run, "synthetic", "auto", tmp_path / "work") == run / "report-synthetic-auto"
    assert report_folder(str(tmp_path / "mine"), run, "synthetic", "auto", tmp_path) == tmp_path / "mine"


@pytest.mark.parametrize("where", ["inside", "link"])
def test_out_inside_an_export_is_refused_by_name(tmp_path, where):
    exports = _export(tmp_path / "shared")
    out = exports / "US" / "report"
    if where == "link":
        (tmp_path / "looks_outside").symlink_to(exports / "US")
        out = tmp_path / "looks_outside" / "report"
    for ckpt in (exports / "US", exports):
        with pytest.raises(UserError, match=r"out=.* lies inside the exported folder .*US. Fix: give a report folder outside it"):
            report_folder(str(out), ckpt, "mhc", "auto", tmp_path)
    assert sorted(p.name for p in (exports / "US").iterdir()) == ["culture_card.json"]
