"""docs/text_recipes.md's table is rendered from the measured docs/text_recipes.json (never typed), every row names the
command that measured it (a `crossmod cv` of a shipped experiment), and what the page claims holds in the numbers: the
recipe at or above the TF-IDF and probe rows in mean held-out AUROC, on the mean over seeds."""

from __future__ import annotations

import json
import shlex

from scripts.text_recipes import END, PAGE, RESULTS, START, render

RESULTS_DATA = json.loads(RESULTS.read_text())


def test_the_table_is_rendered_from_the_measurements():
    block = PAGE.read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert block == render(RESULTS_DATA).strip()


def test_every_row_names_its_command_and_seeds_differ():
    studies: dict[str, set[int]] = {}
    for row in RESULTS_DATA["rows"]:
        argv = shlex.split(row["command"])
        assert argv[:2] == ["crossmod", "cv"] and any(a.startswith("experiment=") for a in argv), row["command"]
        assert f"seed={row['seed']}" in argv and row["rule"] == "inner" and row["folds"] == 3
        studies.setdefault(row["study"], set()).add(row["seed"])
    assert studies and all(len(seeds) >= 2 for seeds in studies.values()), studies


def test_the_recipe_is_at_or_above_its_baselines_on_the_mean_over_seeds():
    by_study: dict[str, list[dict]] = {}
    for row in RESULTS_DATA["rows"]:
        by_study.setdefault(row["study"], []).append(row)
    for study, rows in by_study.items():
        mean = {kind: sum(r[kind]["mean"] for r in rows) / len(rows) for kind in ("model", "tfidf", "probe", "majority")}
        assert mean["model"] >= mean["tfidf"] and mean["model"] >= mean["probe"] and mean["model"] > mean["majority"], (study, mean)


def test_the_fixture_table_is_rendered_from_its_runs_and_covers_every_text_recipe():
    from scripts.text_recipe_fixtures import END as FIXTURE_END
    from scripts.text_recipe_fixtures import FIXTURES
    from scripts.text_recipe_fixtures import RESULTS as FIXTURE_RESULTS
    from scripts.text_recipe_fixtures import START as FIXTURE_START

    results = json.loads(FIXTURE_RESULTS.read_text())
    block = PAGE.read_text().split(FIXTURE_START, 1)[1].split(FIXTURE_END, 1)[0].strip()
    assert block == render(results).strip()
    assert [row["experiment"] for row in results["rows"]] == list(FIXTURES)  # every dataset's recipe, none typed in
    for row in results["rows"]:
        argv = shlex.split(row["command"])
        assert argv[:3] == ["crossmod", "cv", f"experiment={row['experiment']}"] and "data.raw_dir=<fixture>" in argv
        assert {"tfidf", "majority", "probe"} <= set(row) and row["rule"] in ("inner", "val_split") and row["folds"] == 3
