"""The numbers a training or scoring job reads, checked for type and range before anything is built.

A batch size of 0 divided by zero after the data was made, `num_workers=-1` failed inside torch's DataLoader, and
`model.optimizer.lr=-1` or `lr=abc` came back wrapped in Hydra's "Error in call to target" text after the data
module and the model were built. Each is a value the user typed and can fix, so it is one line naming the key,
what it must be and an example, from the composed config alone (`crossmod.launch.preflight`). A key a config does not
have is skipped, and so is an interpolation: the config's own values are not the user's mistake, and resolving one
may do the work this check runs before (`model.optimizer.lr` reads the model's base, which builds tiny test models).
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from crossmod.runtime.user_errors import UserError


@dataclass(frozen=True)
class Range:
    """What a setting must be: a whole number or any number, at least `low` (or above it), null allowed or not."""

    whole: bool
    low: float
    above: bool = False  # the value must exceed `low` (a learning rate), not merely reach it
    high: float | None = None  # and at most this (a probability threshold)
    nullable: bool = False
    example: str = ""

    def holds(self, value: object) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.whole and not isinstance(value, int)):
            return False
        if self.high is not None and value > self.high:
            return False
        return value > self.low if self.above else value >= self.low

    def __str__(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        bound = f"above {self.low:g}" if self.above else f"≥ {self.low:g}"
        bound += f" and ≤ {self.high:g}" if self.high is not None else ""
        return f"{kind} {bound}" + (" (or null)" if self.nullable else "")


RANGES = {
    "seed": Range(whole=True, low=0, example="1234"),
    # the scoring jobs' own keys (evaluate, predict, retrieval-db)
    "batch_size": Range(whole=True, low=1, example="16"),
    "num_workers": Range(whole=True, low=0, example="2 (0: load in the main process)"),
    "threshold": Range(whole=False, low=0, high=1, example="0.5"),
    "k": Range(whole=True, low=1, nullable=True, example="null (the card's own k)"),
    "data.batch_size": Range(whole=True, low=1, example="32"),
    "data.num_workers": Range(whole=True, low=0, example="2 (0: load in the main process)"),
    "eval_data.batch_size": Range(whole=True, low=1, example="32"),
    "trainer.max_epochs": Range(whole=True, low=-1, nullable=True, example="10 (-1: until stopped)"),
    "trainer.min_epochs": Range(whole=True, low=0, nullable=True, example="1"),
    "trainer.max_steps": Range(whole=True, low=-1, example="1000 (-1: no limit)"),
    "trainer.accumulate_grad_batches": Range(whole=True, low=1, example="4"),
    "trainer.check_val_every_n_epoch": Range(whole=True, low=1, nullable=True, example="1"),
    "trainer.gradient_clip_val": Range(whole=False, low=0, nullable=True, example="1.0"),
    "model.optimizer.lr": Range(whole=False, low=0, above=True, example="1e-3"),
    "model.optimizer.weight_decay": Range(whole=False, low=0, example="0.01"),
}


def check_ranges(cfg: DictConfig, ranges: dict[str, Range] = RANGES) -> None:
    """Refuse the first setting of `ranges` the composed config holds outside its range, naming key and fix."""
    for key, rule in ranges.items():
        parent_key, _, last = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key, default=None) if parent_key else cfg
        if not isinstance(parent, DictConfig) or last not in parent.keys():  # keys(): `in` would resolve the value
            continue
        if OmegaConf.is_interpolation(parent, last) or OmegaConf.is_missing(parent, last):  # the job resolves (reads files,
            continue  # builds models) or names these itself
        value = parent[last]
        if not rule.holds(value):
            raise UserError(f"{key}={value!r} is not {rule}", f"pass {key}={rule.example}", key)
