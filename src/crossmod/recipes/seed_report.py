"""Mean ± std over seeds: `crossmod seed-report runs=<multirun folder>` (writes <runs>/seed_summary.json)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="seed_report")
@entry_point(preflight.reads(runs="a folder of runs (a -m seed=… multirun folder)"))
def main(cfg: DictConfig) -> None:
    import json
    from pathlib import Path

    from crossmod.evaluation.summary import shown
    from crossmod.reports.seeds import summarise
    from crossmod.runtime.user_errors import UserError

    runs = Path(cfg.runs)
    summary = summarise(runs)
    if not summary:
        raise UserError(f"runs={runs}: no runs (metrics.json) under it", "pass runs=<the multirun folder>", "runs")
    from crossmod.data.cache_files import write_file

    # through the one writer: a link planted in the runs folder is replaced, never written through
    write_file(runs / "seed_summary.json", json.dumps(summary, indent=1).encode(), "seed summary", user_folder=True)
    for name, result in summary.items():
        print(f"{shown(name)} (seeds {result['seeds']})")  # a shared file's name, as words
        for key in ("val/mean/auroc", "test/mean/auroc", "test/mean/acc"):
            if key in result["metrics"]:
                m = result["metrics"][key]
                print(f"  {key}: {m['mean']:.4f} ± {m['std']:.4f}")
        for problem in result["problems"]:
            print(f"  problem: {problem}")


if __name__ == "__main__":
    main()
