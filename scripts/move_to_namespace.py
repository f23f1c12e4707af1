"""Stage 1 of the package redesign (docs/DESIGN.md): the four top-level packages move under `src/crossmod/`, run once.

    python scripts/move_to_namespace.py

`git mv`s datamodules → src/crossmod/data, models → src/crossmod/models, evaluation → src/crossmod/evaluation,
training → src/crossmod/training and configs → src/crossmod/configs (a `configs` link stays in the checkout), then
rewrites every tracked text file: import statements, dotted module names (`_target_:` paths, `python -m …`,
monkeypatch targets; only where the name after the dot is a module of that package, so `models.append` stays) and
file paths (`training/pipeline.py` → `src/crossmod/training/pipeline.py`, not `tests/training/…`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOVES = {"datamodules": "data", "models": "models", "evaluation": "evaluation", "training": "training"}
TEXT = (".py", ".yaml", ".yml", ".md", ".sh", ".cfg", ".toml", ".txt", ".json", ".sbatch", "Makefile", ".ini", ".j2")


def children(package: Path) -> set[str]:
    """The names importable right under a package: its modules and subpackages."""
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in package.iterdir() if p.is_dir() and any(p.rglob("*.py"))}  # namespace packages too


def rewrite(text: str, kids: dict[str, set[str]], python: bool) -> str:
    for old, new in MOVES.items():
        dotted = "|".join(sorted(kids[old], key=len, reverse=True))
        # dotted module names: models.vlm.classifier → crossmod.models.vlm.classifier (not foo.models.x, not models.append)
        text = re.sub(rf"(?<![\w.]){old}\.({dotted})\b", rf"crossmod.{new}.\1", text)
        if python:
            text = re.sub(rf"^(\s*)from {old} import ", rf"\1from crossmod.{new} import ", text, flags=re.M)
            text = re.sub(rf"^(\s*)import {old}$", rf"\1import crossmod.{new} as {old}", text, flags=re.M)

        # file paths that exist: training/pipeline.py → src/crossmod/training/pipeline.py (tests/training/… keeps its
        # place; prose such as "training/validation" is no path and stays)
        def path(match: re.Match, old: str = old, new: str = new) -> str:
            prefix, rest = match.group(1), match.group(2)
            first = rest.split("/")[0].removesuffix(".py")
            if first not in kids[old] and rest not in FILES[old]:
                return match.group(0)
            return f"{prefix}src/crossmod/{new}/{rest}"

        text = re.sub(rf"(?<![\w./-])((?:\.\./)*){old}/([\w./*-]*\w)", path, text)
    return text


FILES: dict[str, set[str]] = {}


def main() -> None:
    kids = {old: children(ROOT / old) for old in MOVES}
    for old in MOVES:
        FILES[old] = {str(p.relative_to(ROOT / old)) for p in (ROOT / old).rglob("*") if "__pycache__" not in p.parts}
    (ROOT / "src" / "crossmod").mkdir(parents=True, exist_ok=True)
    for old, new in MOVES.items():
        subprocess.run(["git", "mv", old, f"src/crossmod/{new}"], cwd=ROOT, check=True)
    subprocess.run(["git", "mv", "configs", "src/crossmod/configs"], cwd=ROOT, check=True)
    (ROOT / "configs").symlink_to("src/crossmod/configs")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    changed = 0
    for name in files:
        path = ROOT / name
        if name == "scripts/move_to_namespace.py" or path.is_symlink() or not path.is_file() or not name.endswith(TEXT):
            continue
        text = path.read_text()
        new = rewrite(text, kids, name.endswith(".py"))
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"rewrote {changed} files")


if __name__ == "__main__":
    main()
