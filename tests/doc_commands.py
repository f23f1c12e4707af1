"""The commands the docs show (README.md, docs/*.md, bench/README.md and the launch lines at the top of every
experiment recipe), read as a user would copy them, with their placeholders filled.

A command is one line of a fenced code block, or inline code, that starts with a program a user runs. The
notation the docs use is undone here, once: `[optional parts]` are included (the first alternative of `a|b`),
`<placeholders>` and `…` become values of the right kind, `x=0,1,2` under `-m` keeps its first value, and a
trailing `# comment` or `(remark)` is dropped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
RECIPES = sorted((ROOT / "configs" / "experiment").glob("*.yaml"))
PROGRAMS = ("python", "crossmod", "sbatch", "make", "wandb", "sudo", "aws", "pip", "apt-get", "bash")
STARTS_WITH_PROGRAM = re.compile(rf"({'|'.join(map(re.escape, PROGRAMS))})(\s|$)")
PLACEHOLDER_PATH = "/placeholder/path"
# a group placeholder (`data=<dataset>`, `experiment=<name>`, `data=…`) gets an option that needs nothing else
GROUP_FILLS = {"data": "synthetic", "experiment": "synthetic_concat", "eval_data": "mhc", "model": "concat"}


@dataclass
class Command:
    source: str  # file:line
    text: str  # as written
    argv: list[str] = field(default_factory=list)  # as run, placeholders filled
    multirun: bool = False

    @property
    def program(self) -> str:
        """`train.py`, `prepare.py`, `crossmod train`, `sbatch`, `make` …: what the command starts."""
        if self.argv[0] == "crossmod":
            return " ".join(self.argv[:2])
        if self.argv[0] == "python":
            return " ".join(self.argv[1:3]) if self.argv[1] == "-m" else self.argv[1]
        return self.argv[0]

    def __str__(self) -> str:
        return f"{self.source}: {self.text}"


def documented_commands() -> list[Command]:
    commands = []
    for path in DOCS:
        for number, line in _code_lines(path.read_text()):
            commands.append(Command(f"{path.relative_to(ROOT)}:{number}", line))
    for path in RECIPES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("#"):
                break
            text = line.lstrip("#").strip()
            if STARTS_WITH_PROGRAM.match(text):
                commands.append(Command(f"{path.relative_to(ROOT)}:{number}", text))
    for command in commands:
        command.argv, command.multirun = to_argv(command.text)
    return commands


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, command) for every command line of fenced blocks and every inline command."""
    found, in_block = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            for part in re.split(r"\s&&\s", line.strip()):
                if STARTS_WITH_PROGRAM.match(part):
                    found.append((number, part))
            continue
        for code in re.findall(r"`([^`\n]+)`", line):
            if STARTS_WITH_PROGRAM.match(code) and code not in ("python -m",):
                found.append((number, code))
    return found


def to_argv(text: str) -> tuple[list[str], bool]:
    """The documented notation undone: what a user types after filling the placeholders."""
    text = re.split(r"\s{2,}(?:#|\()|\s#\s", text)[0].strip()  # trailing comment or remark
    text = text.replace("\\|", "|")  # an escaped pipe inside a Markdown table
    text = re.sub(r"(?<=\s)\[([^\[\]]*)\]", _optional, text)
    text = re.sub(r"<[^<>]*>", "PLACEHOLDER", text)
    argv = []
    for token in shlex.split(text):
        if token in ("…", "…]", "PLACEHOLDER…"):
            continue
        token = token.replace("PLACEHOLDER…", "PLACEHOLDER").replace("…", PLACEHOLDER_PATH)
        key, eq, value = token.partition("=")
        if eq and key.lstrip("+~") in GROUP_FILLS and value in ("PLACEHOLDER", PLACEHOLDER_PATH):
            raw_dir_given = re.search(r"(^|\s)data\.raw_dir=", text) is not None
            token = f"{key}={'multi3hate' if key == 'data' and raw_dir_given else GROUP_FILLS[key.lstrip('+~')]}"
        else:  # a whole value or path start becomes a path, a placeholder inside a name a word
            token = re.sub(r"(^|=)PLACEHOLDER", lambda m: m.group(1) + PLACEHOLDER_PATH, token).replace("PLACEHOLDER", "placeholder")
        argv.append(token)
    multirun = "-m" in argv[2:] or "--multirun" in argv
    if multirun:
        argv = [a for i, a in enumerate(argv) if not (a in ("-m", "--multirun") and i >= 2)]
        argv = [_first_of_sweep(a) for a in argv]
    return argv, multirun


def _optional(match: re.Match) -> str:
    """`[culture=DE]`, `[--out x]`, `[split=auto|test]`: included (first alternative); `[overrides]`: a description."""
    part = match.group(1).split("|")[0]
    return part if part.startswith("-") or "=" in part else ""


def _first_of_sweep(token: str) -> str:
    """`fold=0,1,2` → `fold=0` (lists in brackets stay whole)."""
    key, eq, value = token.partition("=")
    if eq and "," in value and not value.startswith(("[", "{", "'", '"')):
        return f"{key}={value.split(',')[0]}"
    return token


def hydra_overrides(argv: list[str], start: int) -> tuple[list[str], list[str]]:
    """(overrides, flags) of a Hydra program's arguments from `start` on."""
    rest = argv[start:]
    return [a for a in rest if not a.startswith("-")], [a for a in rest if a.startswith("-")]
