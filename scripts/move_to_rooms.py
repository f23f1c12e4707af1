"""The house cut by concept (issue 60): `crossmod.lib` dissolves into rooms named for what they hold, run once.

    python scripts/move_to_rooms.py

`git mv`s every module of src/crossmod/lib to the room `ROOMS` names (a few get the name of what they hold on the
way: `artifacts.py` → `artifacts/culture_folders.py`, `report.py` → `results/culture_table.py`, …), writes each
room's `__init__` (its docstring says what belongs there), then rewrites every tracked text file: dotted module
names (imports, `_target_:` paths, monkeypatch targets), `from crossmod.lib import <module>` lines and file paths
(`src/crossmod/lib/scoring.py` → `src/crossmod/inference/scoring.py`). Records of past runs (bench/results/) and the
two move scripts keep their text. Tests move beside the room they test (`TESTS`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "crossmod"

# old module under crossmod.lib → new module under crossmod, room by room (a room imports only the rooms above it)
ROOMS: dict[str, dict[str, str]] = {
    "runtime": {
        "user_errors": "user_errors", "value_ranges": "value_ranges", "console": "console", "redaction": "redaction",
        "threads": "threads", "resolvers": "resolvers", "run_environment": "run_environment",
        "strategies": "strategies", "callbacks.progress": "progress",
    },
    "inference": {"scoring": "scoring", "predicting": "new_memes", "callbacks.retrieval_bank": "retrieval_bank"},
    "artifacts": {
        "runs": "runs", "finished_run": "finished_run", "bases": "bases", "model_cards": "model_cards",
        "consolidate": "consolidate", "artifacts": "culture_folders", "export_readme": "export_readme",
        "loading": "loading", "retrieval_db": "retrieval_db",
    },
    "prompting": {
        "chat_answers": "chat_answers", "exemplars": "exemplars", "fewshot_retrieval": "exemplar_pool",
        "clip_embeddings": "clip_embeddings", "fewshot_prompts": "fewshot_prompts",
        "memebridge_prompts": "memebridge_prompts", "zeroshot": "zeroshot", "fewshot": "fewshot",
        "memebridge": "memebridge",
    },
    "results": {
        "baselines": "baselines", "scored_splits": "scored_splits", "evaluating": "evaluate",
        "eval_data": "eval_data", "run_figures": "run_figures", "report": "culture_table",
    },
    "training": {
        "pipeline": "pipeline", "slurm": "slurm", "selection": "selection", "run_status": "run_status",
        "wandb_offline": "wandb_offline",
        **{f"callbacks.{name}": f"callbacks.{name}" for name in (
            "checkpoint", "fold_results", "functional_tests", "interruption", "predictions", "rng_states",
            "stall_report", "tag_writer", "wandb_report")},
    },
    "reports": {"cv_report": "cv", "seed_report": "seeds", "transfer_report": "transfer", "zeroshot_report": "zeroshot"},
    "launch": {"preflight": "preflight", "command_line": "command_line"},
}
MOVES = {old: f"{room}.{new}" for room, modules in ROOMS.items() for old, new in modules.items()}
MOVES["callbacks"] = "training.callbacks"

DOCSTRINGS = {
    "runtime": "What every process shares, whatever job it runs: the one-line user errors and value checks, the console\n"
    "and its progress lines, thread budgets, the accelerator strategies, the config resolvers, redaction and the\n"
    "environment a run records. It imports no other room; nothing here knows a job.",
    "inference": "Scoring memes with a trained classifier through Lightning's predict loop, the new memes `crossmod\n"
    "predict` reads and the file it writes, and the retrieval bank a retrieval classifier answers from. No training,\n"
    "no run folders, no prompting.",
    "artifacts": "What a run leaves and ships: run folders and their files, exported culture folders (cards, bases,\n"
    "weights), the one loader `load(reference)`, consolidated DeepSpeed checkpoints and retrieval databases. No scores\n"
    "are computed here beyond loading what scores them.",
    "prompting": "The prompting jobs' bodies (zero-shot, few-shot, MemeBridge) and what they share: chats, greedy\n"
    "answers through Lightning's predict loop, exemplars and the pool they are drawn from, CLIP embeddings. No\n"
    "training and no fine-tuned classifiers.",
    "results": "What one run's scores are: which memes each split scores, the baselines beside them, a second dataset\n"
    "(`eval_data=`), the per-culture table, the figures, and the evaluate job's body. Every score itself is a pure\n"
    "function in crossmod.evaluation; this room only chooses memes and writes what a person reads.",
    "training": "Training runs: the pipeline `crossmod train` runs, its Lightning callbacks, SLURM preemption, how a\n"
    "fold picks its weights, run status and offline W&B files.",
    "reports": "Reports across runs: cross-validation folds, seeds, culture transfer and zero-shot runs side by side.\n"
    "They read run files only; nothing here trains or scores.",
    "launch": "How a job starts: its command line read before the job is imported, and the checks every entry point\n"
    "makes before it builds anything.",
}

# tests beside the room they test (the rest of tests/training tests training runs and stays)
TESTS = {
    "tests/training/test_console.py": "tests/runtime/test_console.py",
    "tests/training/test_progress_lines.py": "tests/runtime/test_progress_lines.py",
    "tests/training/test_strategies.py": "tests/runtime/test_strategies.py",
    "tests/training/test_scoring_precision.py": "tests/inference/test_scoring_precision.py",
    "tests/training/test_predict_ocr.py": "tests/inference/test_predict_ocr.py",
    "tests/training/test_base_names.py": "tests/artifacts/test_base_names.py",
    "tests/training/test_portable_exports.py": "tests/artifacts/test_portable_exports.py",
    "tests/training/test_export_predict.py": "tests/artifacts/test_export_predict.py",
    "tests/training/test_fewshot_retrieval.py": "tests/prompting/test_fewshot_retrieval.py",
    "tests/training/test_fewshot_run.py": "tests/prompting/test_fewshot_run.py",
    "tests/training/test_memebridge_prompting.py": "tests/prompting/test_memebridge_prompting.py",
    "tests/training/test_zeroshot_families.py": "tests/prompting/test_zeroshot_families.py",
    "tests/training/test_evaluate.py": "tests/results/test_evaluate.py",
    "tests/training/test_culture_table.py": "tests/results/test_culture_table.py",
    "tests/training/test_cv_report.py": "tests/reports/test_cv_report.py",
    "tests/training/test_culture_transfer_cv.py": "tests/reports/test_culture_transfer_cv.py",
    "tests/training/test_cross_validate_zeroshot.py": "tests/reports/test_cross_validate_zeroshot.py",
}
KEEP = ("bench/results/", "scripts/move_to_namespace.py", "scripts/move_to_rooms.py")
TEXT = (".py", ".yaml", ".yml", ".md", ".sh", ".cfg", ".toml", ".txt", ".json", ".sbatch", "Makefile", ".ini", ".j2")


def old_path(old: str) -> str:
    return "src/crossmod/lib/" + old.replace(".", "/")


def new_path(new: str) -> str:
    return "src/crossmod/" + new.replace(".", "/")


def rewrite(text: str, python: bool) -> str:
    by_length = sorted(MOVES, key=len, reverse=True)
    dotted = "|".join(re.escape(name) for name in by_length)
    # dotted module names, longest first: crossmod.lib.callbacks.progress → crossmod.runtime.progress
    text = re.sub(rf"\bcrossmod\.lib\.({dotted})\b", lambda m: f"crossmod.{MOVES[m.group(1)]}", text)
    if python:
        # from crossmod.lib import a, b → one line per room (a renamed module keeps its local name)
        def from_lib(match: re.Match) -> str:
            indent, names = match.group(1), [n.strip() for n in match.group(2).split(",")]
            lines = []
            for name in names:
                room, _, module = MOVES[name].rpartition(".")
                alias = f" as {name}" if module != name else ""
                lines.append(f"{indent}from crossmod.{room} import {module}{alias}")
            return "\n".join(lines)

        text = re.sub(r"^(\s*)from crossmod\.lib import ([\w, ]+)$", from_lib, text, flags=re.M)
        text = re.sub(r"(\\n|; )from crossmod\.lib import (\w+)", lambda m: f"{m.group(1)}from crossmod.{MOVES[m.group(2)].rpartition('.')[0]} import {MOVES[m.group(2)].rpartition('.')[2]}", text)

    # file paths: src/crossmod/lib/callbacks/progress.py → src/crossmod/runtime/progress.py (also the shorthand lib/…)
    def path(match: re.Match) -> str:
        prefix, rest, suffix = match.group(1) or "", match.group(2), match.group(3) or ""
        key = rest.replace("/", ".")
        if key not in MOVES:
            return match.group(0)
        target = new_path(MOVES[key])
        return (target if prefix else target.removeprefix("src/crossmod/")) + suffix

    names = "|".join(re.escape(name.replace(".", "/")) for name in by_length)
    text = re.sub(rf"(?<![\w/.-])(src/crossmod/)?lib/({names})(\.py|/)?(?![\w])", path, text)
    return text


def main() -> None:
    for room, modules in ROOMS.items():
        (SRC / room).mkdir(exist_ok=True)
        for old, new in modules.items():
            target = SRC / (new_path(f"{room}.{new}").removeprefix("src/crossmod/") + ".py")
            target.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", old_path(old) + ".py", str(target)], cwd=ROOT, check=True)
        init = SRC / room / "__init__.py"
        init.write_text(f'"""{DOCSTRINGS[room]}\n"""\n')
        subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    subprocess.run(["git", "mv", "src/crossmod/lib/callbacks/__init__.py", "src/crossmod/training/callbacks/__init__.py"], cwd=ROOT, check=True)
    subprocess.run(["git", "rm", "-q", "src/crossmod/lib/__init__.py"], cwd=ROOT, check=True)
    for old, new in TESTS.items():
        (ROOT / new).parent.mkdir(exist_ok=True)
        init = (ROOT / new).parent / "__init__.py"
        if not init.exists():
            init.write_text("")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    changed = 0
    for name in files:
        file = ROOT / name
        if name.startswith(KEEP) or file.is_symlink() or not file.is_file() or not name.endswith(TEXT):
            continue
        text = file.read_text()
        new = rewrite(text, name.endswith(".py"))
        for old_test, new_test in TESTS.items():
            new = new.replace(old_test, new_test)
        if new != text:
            file.write_text(new)
            changed += 1
    print(f"rewrote {changed} files")


if __name__ == "__main__":
    main()
