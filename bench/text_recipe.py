"""How long the recommended text recipe's cross-validation takes on a Multi3Hate-sized release: 3 grouped folds of 300
memes with English captions, `crossmod cv experiment=multi3hate_text`, beside the part every run pays before it
trains (the baselines and the probe: the same command with trainer.max_epochs=0), in the same round.

    python bench/text_recipe.py [--smoke] [--repeats N]

The release is written in Multi3Hate's published layout (captions/en.csv, final_annotations.csv, memes/…) by the
test suite's layout writer; the target is the whole CV under 10 minutes on a 2-core CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Result, interleave, parser, repeats

from tests.data.sources import layouts

BUDGET_S = 600.0  # the budget for a 3-fold Multi3Hate-sized CV on 2 CPU cores


def timed_cv(raw: Path, work: Path, memes_tag: str, extra: list[str]) -> float:
    command = [
        sys.executable, "-m", "crossmod", "cv", "experiment=multi3hate_text", f"data.raw_dir={raw}", "num_folds=3",
        f"paths.data_dir={work / 'data'}", f"paths.log_dir={work / 'runs' / memes_tag}", "print_table=false", *extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    start = time.perf_counter()
    subprocess.run(command, cwd=work, env=env, check=True, capture_output=True, timeout=3 * BUDGET_S)
    return time.perf_counter() - start


def main() -> None:
    args = parser(__doc__.splitlines()[0], default_repeats=1).parse_args()
    memes = 30 if args.smoke else 300
    result = Result(
        "text_recipe", "How long does a 3-fold Multi3Hate-sized CV of the text recipe take on this machine?", args, {"memes": memes}
    )
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        raw = layouts.multi3hate(work / "Multi3Hate", memes=memes, languages=("en",))
        timed_cv(raw, work, "warm", ["trainer.max_epochs=0"])  # converts the release once (not what either variant measures)
        counter = iter(range(1_000_000))
        rounds = interleave(
            {
                "recipe_cv": lambda: timed_cv(raw, work, f"recipe{next(counter)}", []),
                "baselines_only_cv": lambda: timed_cv(raw, work, f"floor{next(counter)}", ["trainer.max_epochs=0"]),
            },
            repeats(args),
        )
    for name, values in rounds.items():
        result.variant(name, "s", values)
    ratio = result.paired(
        "recipe_vs_baselines_only", rounds["recipe_cv"], rounds["baselines_only_cv"], "recipe CV / the same CV without training, same round"
    )
    seconds = sorted(rounds["recipe_cv"])[len(rounds["recipe_cv"]) // 2]
    met = result.target("cv_seconds", seconds, "<=", BUDGET_S, f"the 3-fold CV of {memes} memes within {BUDGET_S:g} s (median)")
    result.row(
        "3-fold CV, `experiment=multi3hate_text` vs without training",
        "recipe_cv",
        "baselines_only_cv",
        "recipe_vs_baselines_only",
        "cv_seconds",
        unit="s",
    )
    result.finding(
        f"The recipe's 3-fold CV of {memes} memes took {seconds:.0f} s ({'within' if met else 'over'} the {BUDGET_S:g} s budget), "
        f"{ratio:.1f}× the same CV without a training step (conversion excluded: both read the converted shards)."
    )
    result.write()


if __name__ == "__main__":
    main()
