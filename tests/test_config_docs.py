"""Config files document their keys, as a config hub does: each key a job reads says what it takes and why, in a comment on
its line or in the comment lines right above it (a block's comment may cover its first key).

Checked here for every job's own config (src/crossmod/configs/*.yaml: train, evaluate, export, predict, prepare and the
tools), every dataset's (data/) and model family's (model/), and the trainer, strategy, logger, callback, path, eval_data,
debug and multirun groups: the keys users type on the command line; and for the studies' recipes: the experiments
(experiment/), the shared Hateful Memes protocol (recipe/), the W&B sweeps (sweeps/), the Optuna search (hparams_search/)
and crossmod's Hydra settings (hydra/, hydra/launcher/: their keys sit at the file's top level, so they are checked like
any other). Hydra's own parts need none: a `defaults:` list, a top-level `hydra:` block, `_target_` and `_partial_`; nor
do the entries of a `heads:` or `native_sets:` block, which are data (the heads themselves, a study's prompts per
language), described at the block. Personal configs under local/ (git-ignored) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "crossmod" / "configs"
KEY = re.compile(r"^(\s*)([A-Za-z_][\w.@/-]*):(\s|$)")
HYDRA_BLOCKS = ("defaults", "hydra")
HYDRA_KEYS = ("_target_", "_partial_")
DATA_BLOCKS = ("heads", "native_sets")  # their entries are data (heads, a study's prompts), described at the block
GROUPS = (
    *("data", "model", "model/objective", "model/scoring", "trainer", "strategy", "logger", "callbacks", "paths"),
    *("eval_data", "debug", "multirun", "policy"),
    *("experiment", "recipe", "sweeps", "hparams_search", "hydra", "hydra/launcher"),
)
DOCUMENTED = sorted([*CONFIGS.glob("*.yaml"), *(path for group in GROUPS for path in (CONFIGS / group).glob("*.yaml"))])


def undocumented_keys(text: str) -> list[str]:
    """`line: key` for every key with no comment on its line or on the line(s) right above it."""
    found, commented, inside = [], False, None  # inside: the indent of a block whose entries are exempt
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            commented = False
            continue
        indent = len(line) - len(line.lstrip())
        if inside is not None and (indent > inside or (indent == inside and stripped.startswith("-"))):
            continue
        inside = None
        if stripped.startswith("#"):
            commented = True
            continue
        match = KEY.match(line)
        key = match.group(2) if match else None
        if key and indent == 0 and key in HYDRA_BLOCKS:
            inside = 0
        elif key and key not in HYDRA_KEYS and "#" not in line and not commented:
            found.append(f"{number}: {key}")
        if key in DATA_BLOCKS:
            inside = indent
        commented = False
    return found


def test_the_check_finds_a_key_without_a_comment():
    text = "# what a is\na: 1\nb: 2   # what b is\nc: 3\ndefaults:\n  - x\nhydra:\n  run: {dir: .}\nd:\n  e: 1   # e\n"
    assert undocumented_keys(text) == ["4: c", "9: d"]
    heads = "heads:   # the heads\n  US: {kind: binary}\n_target_: x.Y\nsource:   # s\n  _target_: x.Z\n  k: 1\n"
    assert undocumented_keys(heads) == ["6: k"]


@pytest.mark.parametrize("config", [str(p.relative_to(CONFIGS)) for p in DOCUMENTED])
def test_every_key_of_a_documented_config_is_documented(config):
    missing = undocumented_keys((CONFIGS / config).read_text())
    assert not missing, f"src/crossmod/configs/{config}: keys without a comment (type, default, why): {missing}"
