"""Re-report cross-validation folds: `crossmod cv-report runs=<folder of fold runs> [out=<folder>]`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.lib import preflight
from crossmod.lib.resolvers import package_configs
from crossmod.lib.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="cv_report")
@entry_point(preflight.reads(runs="a folder of fold runs"))
def main(cfg: DictConfig) -> None:
    from pathlib import Path

    from crossmod.lib.cv_report import TRANSFER, report
    from crossmod.lib.user_errors import UserError

    runs, out = Path(cfg.runs), Path(cfg.out) if cfg.out else None
    results = report(runs, out)
    if not results:
        raise UserError(f"runs={runs}: no fold runs (fold_result.json) under it", "pass runs=<the folder the fold runs wrote>", "runs")
    transfer = results.pop(TRANSFER, None)
    for name, result in results.items():
        mean = result.get("metrics", {}).get("cv/mean/auroc_mean")
        std = result.get("metrics", {}).get("cv/mean/auroc_std")
        rule = result.get("selection", {}).get("rule")
        print(f"{name}: held-out mean AUROC {mean:.4f} ± {std:.4f} (selection: {rule})" if mean is not None else f"{name}: no usable folds")
        for problem in result["problems"]:
            print(f"  problem: {problem}")
    if transfer is not None:
        print(f"culture transfer (Table 11): {(out or runs / 'cv_report') / 'culture_transfer.md'}")


if __name__ == "__main__":
    main()
