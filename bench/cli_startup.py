"""How long `crossmod --help` takes to answer, beside `python train.py --help` (a job's own help, which composes its
Hydra config and so imports the job), each in a fresh interpreter as a user starts it.

    python bench/cli_startup.py [--smoke] [--repeats N]

The command imports the standard library only until a job is chosen (src/crossmod/cli.py); the target is an answer
under 1 s on this machine, and a fraction of what a job's help costs.
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import ROOT, Result, interleave, parser, repeats

HELP_BUDGET_S = 1.0  # what a user waits for a list of commands without noticing


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    args = parser(__doc__.splitlines()[0], default_repeats=7).parse_args()
    commands = {
        "crossmod_help": [sys.executable, "-m", "crossmod", "--help"],
        "train_py_help": [sys.executable, str(ROOT / "train.py"), "--help"],
    }
    result = Result("cli_startup", "How long does crossmod --help take, beside a job's own --help?", args, {"commands": commands})
    rounds = interleave({name: (lambda c=command: timed(c)) for name, command in commands.items()}, repeats(args))
    for name, values in rounds.items():
        result.variant(name, "s", values)
    ratio = result.paired(
        "help_vs_job_help", rounds["crossmod_help"], rounds["train_py_help"], "crossmod --help / python train.py --help, same round"
    )
    result.target("help_fraction", ratio, "<=", 0.25, "crossmod --help costs at most a quarter of a job's --help", times=True)
    seconds = sorted(rounds["crossmod_help"])[len(rounds["crossmod_help"]) // 2]
    met = result.target("help_seconds", seconds, "<=", HELP_BUDGET_S, f"crossmod --help answers within {HELP_BUDGET_S:g} s (median)")
    result.row(
        "`crossmod --help` vs `python train.py --help` (fresh interpreter)",
        "crossmod_help",
        "train_py_help",
        "help_vs_job_help",
        "help_fraction",
        unit="s",
    )
    result.finding(
        f"`crossmod --help` answered in {seconds:.2f} s (median of {len(rounds['crossmod_help'])}, "
        f"{'within' if met else 'over'} the {HELP_BUDGET_S:g} s budget), {ratio:.2f}× the time of `python train.py --help`, "
        "which imports the job to compose its config."
    )
    result.write()


if __name__ == "__main__":
    main()
