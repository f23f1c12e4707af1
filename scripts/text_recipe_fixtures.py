"""The text-recipe study on each dataset's fixture (docs/text_recipes.md, second table): every dataset's text recipe
(`experiment=<dataset>_text`, the packaged all-MiniLM-L6-v2 with LP-FT) in a 3-fold `crossmod cv` of the fixture that
copies its release's layout, beside the baselines measured on the same folds; read from the reports, never typed.

    python scripts/text_recipe_fixtures.py [--only hm_text …]

The fixtures' memes are made up (captions that name their ids, labels by rule): their numbers show that every
dataset runs through the recipe and its baselines, not what the recipe learns on the real release.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.results_file import cv_summary, write_between  # noqa: E402
from scripts.text_recipes import PAGE, render, row_of  # noqa: E402
from tests.data.sources import layouts  # noqa: E402

RESULTS = ROOT / "docs" / "text_recipes_fixtures.json"
START, END = "<!-- text-recipes-fixtures:start -->", "<!-- text-recipes-fixtures:end -->"
SEED = 1
# experiment → (the fixture's writer at a size that leaves three folds their memes, the memes it writes, extra overrides)
FIXTURES: dict[str, tuple[Callable[[Path], Path], int, tuple[str, ...]]] = {
    "multi3hate_text": (lambda root: layouts.multi3hate(root, memes=60, languages=("en",)), 60, ()),
    "mhc_text": (lambda root: layouts.mhc(root, cases=40), 80, ("data.source.languages=[de,nl]",)),
    "hm_text": (lambda root: layouts.hateful_memes(root, train=60, dev=10, test=10), 60, ()),
    "toxictags_text": (lambda root: layouts.toxictags(root, items=80), 80, ()),
    "memebridge_text": (lambda root: layouts.memebridge(root, items=80), 80, ()),
}


def run(experiment: str, work: Path) -> dict:
    """One seed's 3-fold CV of the experiment on its fixture; its cv_summary.json."""
    write, _, extra = FIXTURES[experiment]
    raw = write(work / "raw")
    return cv_summary([f"experiment={experiment}", f"data.raw_dir={raw}", "num_folds=3", f"seed={SEED}", *extra], work, experiment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=list(FIXTURES), choices=list(FIXTURES), help="the experiments to run")
    args = parser.parse_args()
    old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    rows = {row["experiment"]: row for row in old["rows"]}
    for experiment in args.only:
        with tempfile.TemporaryDirectory() as folder:
            summary = run(experiment, Path(folder))
        _, memes, extra = FIXTURES[experiment]
        study = f"{experiment.removesuffix('_text')} fixture ({memes} memes)"
        command = " ".join(["crossmod cv", f"experiment={experiment}", "data.raw_dir=<fixture>", "num_folds=3", f"seed={SEED}", *extra])
        rows[experiment] = {"experiment": experiment, **row_of(summary, study, command, SEED)}
        print(f"{experiment}: done", flush=True)
    results = {"rows": [rows[name] for name in FIXTURES if name in rows]}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_between(PAGE, START, END, render(results), ROOT)
    print(render(results))


if __name__ == "__main__":
    main()
