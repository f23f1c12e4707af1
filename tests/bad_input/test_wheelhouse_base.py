"""The BASE file of `make wheelhouse` (a node's `pip list --format=freeze`) is someone else's text: each package name
becomes a file name of a stand-in wheel, so a name that is a path, a URL or climbs out (`..`) is refused with its line
number before anything is written, and no file lands outside the wheelhouse's folders."""

from __future__ import annotations

import pytest

from scripts.wheelhouse import WheelhouseError, read_base


@pytest.mark.parametrize(
    "line",
    ["../../escaped==1.0", "/etc/cron.d/job==1.0", "pkg/../../x==1.0", "https://example.org/x==1.0", "a\\b==1.0", "..", "-e==1.0"],
)
def test_a_name_that_is_not_a_package_name_is_refused_by_line(tmp_path, line):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(f"torch==2.11.0\n{line}\n")
    with pytest.raises(WheelhouseError, match=r"freeze.txt:2: .* (is not a package name|is not `name==version`)"):
        read_base(freeze)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["freeze.txt"]


def test_real_names_with_dots_dashes_and_underscores_are_read(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("zope.interface==6.0\nnvidia-cuda-runtime-cu12==12.4.127\ntyping_extensions==4.12.2\n")
    assert read_base(freeze) == {"zope-interface": "6.0", "nvidia-cuda-runtime-cu12": "12.4.127", "typing-extensions": "4.12.2"}
