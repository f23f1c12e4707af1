"""Re-report cross-validation folds: `crossmod cv-report runs=<folder of fold runs> [out=<folder>]`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="cv_report")
@entry_point(preflight.reads(runs="a folder of fold runs"))
def main(cfg: DictConfig) -> None:
    from pathlib import Path

    from crossmod.reports.cv import TRANSFER, report, summary_lines
    from crossmod.runtime.user_errors import UserError

    runs, out = Path(cfg.runs), Path(cfg.out) if cfg.out else None
    results = report(runs, out)
    if not results:
        raise UserError(f"runs={runs}: no fold runs (fold_result.json) under it", "pass runs=<the folder the fold runs wrote>", "runs")
    transfer = results.pop(TRANSFER, None)
    for name, result in results.items():
        print("\n".join(summary_lines(name, result)))
    if transfer is not None:
        print(f"culture transfer (Table 11): {(out or runs / 'cv_report') / 'culture_transfer.md'}")


if __name__ == "__main__":
    main()
