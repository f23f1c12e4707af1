"""PNG figures for reports: ROC curves per head and the culture alignment heatmap."""

from __future__ import annotations

import math
from pathlib import Path
from typing import BinaryIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402

from crossmod.evaluation.alignment import BEST  # noqa: E402
from crossmod.evaluation.metrics import culture_auroc  # noqa: E402


def roc_figure(scores: dict[str, tuple[np.ndarray, np.ndarray]], path: Path | BinaryIO, title: str) -> Path | BinaryIO:
    """One ROC curve per head: `scores[head] = (labels, probabilities)`."""
    fig, ax = plt.subplots(figsize=(5, 5))
    for head, (labels, probs) in scores.items():
        if len(set(labels.tolist())) < 2:
            continue
        fpr, tpr, _ = roc_curve(labels, probs)
        ax.plot(fpr, tpr, label=f"{head} (AUROC {culture_auroc(labels.tolist(), probs):.3f})")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title=title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def reliability_figure(
    curves: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], path: Path | BinaryIO, title: str
) -> Path | BinaryIO:
    """One panel per head: observed rate against mean probability per bin, one line per curve
    (`curves[head][name] = (mean probability, observed rate)`, e.g. before and after calibration), the diagonal for
    perfect calibration."""
    fig, axes = plt.subplots(1, len(curves), figsize=(3 * len(curves), 3.4), squeeze=False, sharey=True)
    for ax, (head, named) in zip(axes[0], curves.items(), strict=True):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
        for name, (predicted, observed) in named.items():
            ax.plot(predicted, observed, marker="o", markersize=3, label=name)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean probability", title=head)
        ax.legend(loc="upper left", fontsize=7)
    axes[0][0].set_ylabel("observed rate")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def alignment_heatmap(matrix: dict[str, dict[str, float]], path: Path | BinaryIO, title: str) -> Path | BinaryIO:
    """Rows: heads (or per-culture models); columns: each culture's labels; cell: AUROC."""
    rows, cols = list(matrix), list(next(iter(matrix.values())))
    values = np.array([[matrix[r][c] for c in cols] for r in rows])
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2, 0.8 * len(rows) + 1.5))
    image = ax.imshow(values, cmap="viridis", vmin=np.nanmin(values), vmax=np.nanmax(values))
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set(xlabel="labels of culture", ylabel="scores of head", title=title)
    for i, row in enumerate(values):
        best = int(np.nanargmax(row)) if not all(math.isnan(v) for v in row) else -1
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}" + (BEST if j == best else ""), ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def transfer_heatmap(table: dict[str, dict[str, dict[str, float]]], metric: str, diagonal: dict[str, str], path: Path, title: str) -> Path:
    """Rows: models; columns: cultures' labels; cell: fold mean of `metric` (the row's own culture boxed, best per column †)."""
    rows, cols = list(table), list(next(iter(table.values())))
    values = np.array([[table[r][c][f"{metric}_mean"] for c in cols] for r in rows])
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2.5, 0.7 * len(rows) + 1.5))
    image = ax.imshow(values, cmap="viridis", vmin=np.nanmin(values), vmax=np.nanmax(values))
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set(xlabel="labels of culture", ylabel="model", title=title)
    best = [np.nanmax(values[:, j]) if not np.isnan(values[:, j]).all() else np.nan for j in range(len(cols))]
    for i, row in enumerate(rows):
        for j, value in enumerate(values[i]):
            ax.text(j, i, f"{value:.3f}" + (BEST if value == best[j] else ""), ha="center", va="center", color="white", fontsize=8)
            if diagonal.get(row) == cols[j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
