"""The per-culture table printed at the end of a run."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Any

from rich.console import Console
from rich.table import Table

from crossmod.evaluation.baselines import LABELS
from crossmod.evaluation.metrics import METRIC_LABELS, METRICS, REFERENCE_METRICS


def _fmt(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.3f}"  # None or NaN: not defined


def culture_table(metrics: dict[str, Any], title: str) -> Table:
    """Rows: heads then the macro mean. Columns: every metric the evaluation defines (crossmod.evaluation.metrics.METRICS)
    for the selected weights, as `val / test`; the label facts (the test memes' majority-class rate: accuracy no better
    carries no information) for test; and macro-F1 at the threshold chosen on val, applied once to test."""
    val, test = metrics["best"].get("val", {}), metrics["best"].get("test", {})
    chosen = metrics.get("selection_threshold") or {}
    at_threshold = {**chosen.get("heads", {}), "mean": chosen.get("mean", {})}
    model_metrics = [m for m in METRICS if m not in REFERENCE_METRICS]
    table = Table(title=title)
    table.add_column("head", justify="left")
    for metric in model_metrics:
        table.add_column(f"{METRIC_LABELS[metric]}\nval / test", justify="right", no_wrap=True)
    for metric in REFERENCE_METRICS:
        table.add_column(f"{METRIC_LABELS[metric]}\ntest", justify="right")
    table.add_column("macro-F1\n@ val thr.\ntest", justify="right", no_wrap=True)
    heads = [h for h in (val or test) if h not in ("mean", "all")] + ["mean"]
    for head in heads:
        pairs = [f"{_fmt(val.get(head, {}).get(m))} / {_fmt(test.get(head, {}).get(m))}" for m in model_metrics]
        facts = [_fmt(test.get(head, {}).get(m)) for m in REFERENCE_METRICS]
        threshold = _fmt(at_threshold.get(head, {}).get("macro_f1_at_val_threshold"))
        table.add_row(head, *pairs, *facts, threshold, style="bold" if head == "mean" else None)
    return table


def to_log_files(console: Console) -> None:
    """What `console` printed (it records), written once more into the run's log files (Hydra's `train.log`) and
    nowhere else: the table a person looks for in the run folder, without printing it twice on the console."""
    text = console.export_text()
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            with handler.lock or nullcontext():
                handler.stream.write(text if text.endswith("\n") else text + "\n")
                handler.flush()


def print_table(metrics: dict[str, Any], title: str, note: str | None = None) -> None:
    console = Console(record=True)
    console.print(culture_table(metrics, title))
    console.print(
        "acc and F1 at P >= 0.5; test majority: the accuracy of always answering the test memes' most frequent class (an acc "
        "no higher carries no information); macro-F1 at the threshold that maximised it on val, applied once to test.",
        soft_wrap=True,
    )
    if note:
        console.print(note, soft_wrap=True)
    to_log_files(console)


def baseline_table(metrics: dict[str, Any], title: str) -> Table:
    """The model's test AUROC and accuracy beside each baseline's on the same test memes, per head, and the model's
    AUROC minus the best baseline's (negative: the model loses to a baseline)."""
    rows = metrics["baselines"]["rows"]
    test = metrics["best"].get("test", {})
    names = [name for name in LABELS if name in rows and "test" in rows[name]]
    table = Table(title=title)
    table.add_column("head", justify="left")
    for column in ["model", *(LABELS[name] for name in names)]:
        table.add_column(f"{column}\nAUROC / acc", justify="right", no_wrap=True)
    table.add_column("model −\nbest baseline\nAUROC", justify="right")
    heads = [h for h in test if h not in ("mean", "all")] + ["mean"]
    for head in heads:
        cells = [test.get(head, {})] + [rows[name]["test"].get(head, {}) for name in names]
        pairs = [f"{_fmt(c.get('auroc'))} / {_fmt(c.get('acc'))}" for c in cells]
        others = [c.get("auroc") for c in cells[1:] if c.get("auroc") is not None]
        model = cells[0].get("auroc")
        delta = "—" if model is None or not others else f"{model - max(others):+.3f}"
        table.add_row(head, *pairs, delta, style="bold" if head == "mean" else None)
    return table


def print_baselines(metrics: dict[str, Any]) -> None:
    """The baselines table and the rule behind each of its rows."""
    console = Console(record=True)
    if "test" not in metrics["best"] or not metrics["best"]["test"]:
        return
    console.print(baseline_table(metrics, "Baselines on the same test memes"))
    for name, row in metrics["baselines"]["rows"].items():
        console.print(f"{LABELS.get(name, name)}: {row['name']}; {row['rule']}.", soft_wrap=True)
    lengths = metrics["baselines"].get("caption_tokens")
    if lengths:
        console.print(
            f"Captions: {lengths['truncated']} of {lengths['captions']} cut at max_length={lengths['max_length']} tokens "
            f"(median {lengths['median']:.0f}, 95th percentile {lengths['p95']:.0f}, longest {lengths['max']}).",
            soft_wrap=True,
        )
    languages = metrics["baselines"].get("languages")
    if languages and languages.get("note"):
        console.print(f"Languages: {languages['note']}.", soft_wrap=True, markup=False)  # a shared run's words, not markup
    to_log_files(console)


def calibration_table(calibration: dict[str, Any], title: str) -> Table:
    """Per binary head and their mean: the test memes' ECE, Brier score and log-loss before → after the temperature
    fitted on val (the selection split), and that temperature."""
    table = Table(title=title)
    table.add_column("head", justify="left")
    for column in ("ECE", "Brier", "log-loss"):
        table.add_column(f"{column}\ntest\nbefore → after", justify="right", no_wrap=True)
    table.add_column("temperature\n(fitted on val)", justify="right")
    rows = {**calibration["heads"], "mean": calibration["mean"]}
    for head, row in rows.items():
        cells = [f"{_fmt(row['before'][name])} → {_fmt(row['after'][name])}" for name in ("ece", "brier", "log_loss")]
        temperature = f"{row['temperature']:.3f}" if "temperature" in row else "—"
        table.add_row(head, *cells, temperature, style="bold" if head == "mean" else None)
    return table


def calibration_maps_table(calibration: dict[str, Any], title: str) -> Table | None:
    """Per binary head and their mean: the test memes' ECE after each map fitted on val, the run's own marked (*)."""
    chosen = calibration.get("method", "temperature")
    rows = {**calibration["heads"], "mean": calibration["mean"]}
    if not all("compared" in row for row in rows.values()):
        return None  # a run from before the maps were compared
    table = Table(title=title)
    table.add_column("head", justify="left")
    for method in ("temperature", "platt", "isotonic"):
        table.add_column(f"ECE after\n{method}{' *' if method == chosen else ''}", justify="right")
    for head, row in rows.items():
        cells = [_fmt(row["compared"][method]["ece"]) for method in ("temperature", "platt", "isotonic")]
        table.add_row(head, *cells, style="bold" if head == "mean" else None)
    return table


def print_calibration(metrics: dict[str, Any]) -> None:
    """The calibration table and its rules (the temperature's split, ECE's bins), when the run has both stages."""
    calibration = metrics.get("calibration")
    if not calibration:
        return
    console = Console(record=True)
    console.print(calibration_table(calibration, "Calibration on the test memes"))
    maps = calibration_maps_table(calibration, "Test ECE after each map fitted on val (* the run's)")
    if maps is not None:
        console.print(maps)
    console.print(f"{calibration['rule']}; ECE over {calibration['bins']}.", soft_wrap=True, markup=False)
    to_log_files(console)


def _interval(record: dict[str, Any]) -> str:
    low, high = record["interval"]
    return f"{record['reached']:.3f} [{low:.3f}, {high:.3f}] ({record['hits']}/{record['trials']})"


def policy_table(policy: dict[str, Any], title: str) -> Table:
    """Per culture and action: the threshold chosen on val, the target's value reached there with its Wilson interval
    and counts, and the test memes' precision and recall at that threshold; an unreachable target says so."""
    table = Table(title=title)
    for column in ("head", "action", "target", "threshold", "on val\n[95 % CI] (hits/n)", "test\nprecision / recall"):
        table.add_column(column, justify="left" if column in ("head", "action", "target") else "right", no_wrap=True)
    for head, actions in policy["heads"].items():
        for action, record in actions.items():
            target = f"{record['target']} ≥ {record['goal']:g}"
            if "why" in record:
                table.add_row(head, action, target, "—", f"unreachable: {record['why']}", "—")
                continue
            test = record["test"]
            rates = f"{_fmt(test['precision'])} / {_fmt(test['recall'])}"
            table.add_row(head, action, target, f"{record['threshold']:.4f}", _interval(record), rates)
    return table


def print_policy(metrics: dict[str, Any]) -> None:
    """The policy's thresholds per culture and the rule that chose them, when the run was given a policy."""
    policy = metrics.get("policy")
    if not policy:
        return
    console = Console(record=True)
    console.print(policy_table(policy, f"Policy {policy['name']}: thresholds per culture"), markup=False)
    console.print(f"{policy['rule']}.", soft_wrap=True, markup=False)
    to_log_files(console)


def abstention_table(abstention: dict[str, Any], title: str) -> Table:
    """Per culture and their mean: the test memes' AURC in the disagreement order beside a random and the oracle order,
    and the selective risk at 80 % coverage."""
    table = Table(title=title)
    table.add_column("head", justify="left")
    for column in ("AURC\ndisagreement\norder", "AURC random\norder (risk at\ncoverage 1)", "AURC\noracle", "risk at\ncoverage 0.8"):
        table.add_column(column, justify="right")
    rows = {**abstention["heads"], "mean": abstention["mean"]}
    for head, row in rows.items():
        cells = [_fmt(row[name]) for name in ("aurc", "aurc_random", "aurc_oracle", "risk_at_80_coverage")]
        table.add_row(head, *cells, style="bold" if head == "mean" else None)
    return table


def votes_table(votes: dict[str, Any], title: str) -> Table:
    """Per culture: the held-out memes with its votes, and the run's cross-entropy against the vote share and
    Jensen–Shannon divergence beside the constant baseline's (lower is better), and Pearson's r of p with the share."""
    table = Table(title=title)
    table.add_column("head", justify="left")
    for column in ("memes\nwith votes", "cross-entropy\nrun / constant", "JSD\nrun / constant", "r(p, vote\nshare)"):
        table.add_column(column, justify="right")
    for head, row in votes["heads"].items():
        model, constant = row["model"], row["constant"]
        cells = [str(model["memes"]), *(f"{_fmt(model[k])} / {_fmt(constant[k])}" for k in ("cross_entropy", "jsd")), _fmt(model["pearson"])]
        table.add_row(head, *cells)
    return table


def print_votes(metrics: dict[str, Any]) -> None:
    """Against the annotators' votes, where the held-out memes carry them: the soft metrics table, the cultures'
    disagreement predicted against the annotated, and the rule."""
    votes = metrics.get("votes")
    if not votes:
        return
    console = Console(record=True)
    console.print(votes_table(votes, "Against the annotators' votes on the test memes (lower cross-entropy and JSD: closer)"))
    spread = votes.get("disagreement")
    if spread and spread["memes"]:
        console.print(
            f"Cultures' disagreement on the {spread['memes']} test memes every culture voted on: predicted spread "
            f"{_fmt(spread['predicted_spread'])}, annotated {_fmt(spread['annotated_spread'])}; Pearson r "
            f"{_fmt(spread['pearson'])}, Spearman ρ {_fmt(spread['spearman'])}.",
            soft_wrap=True,
            markup=False,
        )
    console.print(f"{votes['rule']}.", soft_wrap=True, markup=False)
    to_log_files(console)


def print_abstention(metrics: dict[str, Any]) -> None:
    """Which memes to send to review, when the run has two culture heads or more: the abstention table and its rule."""
    abstention = metrics.get("abstention")
    if not abstention:
        return
    console = Console(record=True)
    console.print(abstention_table(abstention, "Abstention on the test memes (lower AURC: disputed memes are the wrong ones)"))
    console.print(f"{abstention['rule']}.", soft_wrap=True, markup=False)
    to_log_files(console)
