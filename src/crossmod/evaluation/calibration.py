"""Whether a culture's 0.8 means 80 %: one binary head's calibration error, Brier score, log-loss and reliability
bins, and the temperature that calibrates its probabilities, as pure functions of labels and probabilities.

A moderator acts on a probability per culture, so a report must say how far each culture's probabilities are from
the rates they claim, not only how well they rank (AUROC). The bins are scikit-learn's `calibration_curve`'s, to the
bit: `n_bins` equal-width bins on [0, 1] (or `quantile`: equal-count bins), each closed on the right (a probability on
an inner edge falls in the lower bin), empty bins dropped. ECE is the binned mean |observed rate − mean probability|,
weighted by the bin's share of the memes (Guo et al. 2017, eq. 3, on these bins). Brier score and log-loss are
scikit-learn's `brier_score_loss` and `log_loss`.

Temperature scaling divides a head's logit by one scalar T > 0 fitted by minimising the log-loss (scipy's bounded
`minimize_scalar`): it moves no ranking, so AUROC is unchanged. Beside it, two
alternatives are fitted on the same memes and reported, never applied by predict: Platt scaling (a slope and an
intercept on the logit, scikit-learn's `LogisticRegression` unpenalised (C = ∞); it moves no ranking either, unless the slope
is negative) and isotonic regression (scikit-learn's `IsotonicRegression`, clipped outside the fitted range; a
monotone step map that can tie memes, so AUROC may move). The memes they are fitted on must be the selection split,
never the memes a reported score is computed on; that rule belongs to the caller, which names it in its report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

STRATEGIES = ("uniform", "quantile")
METHODS = ("temperature", "platt", "isotonic")  # `calibration=`: what a run fits on val, an export carries, predict applies
EPSILON = 1e-12  # probabilities are clipped to [ε, 1 − ε] before their logit is taken (a 0 or 1 has none)


@dataclass(frozen=True)
class Bins:
    """A reliability diagram's points: per non-empty bin, the observed rate, the mean probability and the count."""

    observed: np.ndarray
    predicted: np.ndarray
    counts: np.ndarray
    rule: str  # how the bins were made, for the report ("10 equal-width bins on [0, 1], right-closed")


def _arrays(labels: Sequence[float], probabilities: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    y, p = np.asarray(labels, dtype=float), np.asarray(probabilities, dtype=float)
    if y.shape != p.shape or y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels and probabilities must be two non-empty 1-D arrays of one length, not {y.shape} and {p.shape}")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("labels must be 0 or 1 (one binary head's annotated memes)")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("probabilities must be finite and in [0, 1]")
    return y, p


def reliability_bins(labels: Sequence[float], probabilities: Sequence[float], n_bins: int = 10, strategy: str = "uniform") -> Bins:
    """The reliability diagram's bins: scikit-learn's `calibration_curve` (observed, predicted) with each bin's count."""
    if strategy not in STRATEGIES or n_bins < 1:
        raise ValueError(f"strategy must be one of {STRATEGIES} and n_bins ≥ 1, not {strategy!r} and {n_bins}")
    y, p = _arrays(labels, probabilities)
    edges = np.percentile(p, np.linspace(0, 1, n_bins + 1) * 100) if strategy == "quantile" else np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(edges[1:-1], p)
    total = np.bincount(ids, minlength=n_bins)
    kept = total != 0
    observed = np.bincount(ids, weights=y, minlength=n_bins)[kept] / total[kept]
    predicted = np.bincount(ids, weights=p, minlength=n_bins)[kept] / total[kept]
    kind = "equal-count" if strategy == "quantile" else "equal-width"
    return Bins(observed, predicted, total[kept], f"{n_bins} {kind} bins on [0, 1], right-closed, empty ones dropped")


def expected_calibration_error(labels: Sequence[float], probabilities: Sequence[float], n_bins: int = 10, strategy: str = "uniform") -> float:
    """ECE: Σ_b (n_b / N) · |observed_b − predicted_b| over `reliability_bins`."""
    bins = reliability_bins(labels, probabilities, n_bins, strategy)
    return float(np.sum(bins.counts / bins.counts.sum() * np.abs(bins.observed - bins.predicted)))


def brier_score(labels: Sequence[float], probabilities: Sequence[float]) -> float:
    """scikit-learn's `brier_score_loss`: the mean squared distance of the probability from the label."""
    from sklearn.metrics import brier_score_loss

    y, p = _arrays(labels, probabilities)
    return float(brier_score_loss(y, p, pos_label=1))


def log_loss(labels: Sequence[float], probabilities: Sequence[float]) -> float:
    """scikit-learn's `log_loss` with both classes named (a split with one class still has a log-loss)."""
    from sklearn.metrics import log_loss as sklearn_log_loss

    y, p = _arrays(labels, probabilities)
    return float(sklearn_log_loss(y, p, labels=[0, 1]))


def logits(probabilities: Sequence[float]) -> np.ndarray:
    p = np.clip(np.asarray(probabilities, dtype=float), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def with_temperature(probabilities: Sequence[float], temperature: float) -> np.ndarray:
    """The probabilities after dividing their logits by `temperature` (> 0; 1 leaves them as they are)."""
    if not temperature > 0:
        raise ValueError(f"a temperature must be above 0, not {temperature}")
    return 1.0 / (1.0 + np.exp(-logits(probabilities) / temperature))


def fit_temperature(labels: Sequence[float], probabilities: Sequence[float], bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """The temperature in `bounds` that minimises the log-loss of these (selection-split) memes."""
    from scipy.optimize import minimize_scalar

    y, p = _arrays(labels, probabilities)
    z = logits(p)

    def loss(temperature: float) -> float:
        scaled = z / temperature  # log σ(s) = −log(1 + e^−s), computed stably
        return float(np.mean(y * np.logaddexp(0.0, -scaled) + (1 - y) * np.logaddexp(0.0, scaled)))

    return float(minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": 1e-6}).x)


def fit_platt(labels: Sequence[float], probabilities: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of σ(slope · logit(p) + intercept) that minimise these (selection-split) memes' log-loss."""
    from sklearn.linear_model import LogisticRegression

    y, p = _arrays(labels, probabilities)
    model = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(logits(p)[:, None], y.astype(int))
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def with_platt(probabilities: Sequence[float], slope: float, intercept: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(slope * logits(probabilities) + intercept)))


def fit_isotonic(labels: Sequence[float], probabilities: Sequence[float]) -> tuple[list[float], list[float]]:
    """The isotonic map fitted on these (selection-split) memes as its knots (probability in, probability out)."""
    from sklearn.isotonic import IsotonicRegression

    y, p = _arrays(labels, probabilities)
    model = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
    return [float(x) for x in model.X_thresholds_], [float(v) for v in model.y_thresholds_]


def with_isotonic(probabilities: Sequence[float], knots_in: Sequence[float], knots_out: Sequence[float]) -> np.ndarray:
    """The isotonic map at these probabilities: linear between its knots, clipped outside them (scikit-learn's
    `IsotonicRegression.predict` with out_of_bounds="clip")."""
    return np.interp(np.asarray(probabilities, dtype=float), knots_in, knots_out)


def fit_calibrator(method: str, labels: Sequence[float], probabilities: Sequence[float]) -> dict[str, object]:
    """The calibration map `method` fits on these (selection-split) memes, as plain data a card can carry."""
    if method == "temperature":
        return {"method": method, "temperature": fit_temperature(labels, probabilities)}
    if method == "platt":
        slope, intercept = fit_platt(labels, probabilities)
        return {"method": method, "slope": slope, "intercept": intercept}
    if method == "isotonic":
        knots_in, knots_out = fit_isotonic(labels, probabilities)
        return {"method": method, "knots_in": knots_in, "knots_out": knots_out}
    raise ValueError(f"calibration must be one of {list(METHODS)}, not {method!r}")


MAX_KNOTS = 100_000  # an isotonic map has at most one knot per distinct selection-split probability


def check_calibrator(calibrator: object) -> None:
    """A calibration map read from a file (an export's card): its method known and its numbers usable, or a
    ValueError naming the field."""
    if not isinstance(calibrator, dict) or calibrator.get("method") not in METHODS:
        found = calibrator.get("method") if isinstance(calibrator, dict) else calibrator
        raise ValueError(f"calibrator.method is {found!r}"[:200] + f", not one of {list(METHODS)}")

    def number(name: str, low: float = -np.inf, high: float = np.inf) -> None:
        value = calibrator.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low < value < high) or not np.isfinite(value):
            raise ValueError(f"calibrator.{name} is {value!r}"[:200] + f", not a finite number in ({low}, {high})")

    method = calibrator["method"]
    if method == "temperature":
        number("temperature", 0.0)
    elif method == "platt":
        number("slope")
        number("intercept")
    else:
        knots_in, knots_out = calibrator.get("knots_in"), calibrator.get("knots_out")
        lists = isinstance(knots_in, list) and isinstance(knots_out, list) and 0 < len(knots_in) == len(knots_out) <= MAX_KNOTS
        numbers = lists and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in [*knots_in, *knots_out])
        if not numbers or (np.diff(knots_in) < 0).any() or (np.diff(knots_out) < 0).any():
            raise ValueError(
                "calibrator.knots_in and knots_out must be two lists of one length (1 to 100000) of numbers in [0, 1], "
                "each non-decreasing"
            )


def calibrator_of(row: Mapping[str, object]) -> dict[str, object]:
    """A recorded head's calibration map: its `calibrator`, or for runs and cards from before maps were chosen (a
    temperature only) that temperature's."""
    return row.get("calibrator") or {"method": "temperature", "temperature": row["temperature"]}  # type: ignore[return-value]


def apply_calibrator(probabilities: Sequence[float], calibrator: dict[str, object]) -> np.ndarray:
    """The probabilities through a calibration map `fit_calibrator` made."""
    method = calibrator["method"]
    if method == "temperature":
        return with_temperature(probabilities, float(calibrator["temperature"]))  # type: ignore[arg-type]
    if method == "platt":
        return with_platt(probabilities, float(calibrator["slope"]), float(calibrator["intercept"]))  # type: ignore[arg-type]
    if method == "isotonic":
        return with_isotonic(probabilities, calibrator["knots_in"], calibrator["knots_out"])  # type: ignore[arg-type]
    raise ValueError(f"calibration must be one of {list(METHODS)}, not {method!r}")


def calibration_scores(labels: Sequence[float], probabilities: Sequence[float], n_bins: int = 10, strategy: str = "uniform") -> dict[str, float | str]:
    """One head's row for a report: ECE with its binning rule, Brier score, log-loss and the number of memes."""
    bins = reliability_bins(labels, probabilities, n_bins, strategy)
    return {
        "ece": expected_calibration_error(labels, probabilities, n_bins, strategy),
        "brier": brier_score(labels, probabilities),
        "log_loss": log_loss(labels, probabilities),
        "n": int(bins.counts.sum()),
        "bins": bins.rule,
    }


def temperature_on_selection(
    selection: dict[str, tuple[np.ndarray, np.ndarray]],
    held_out: dict[str, tuple[np.ndarray, np.ndarray]],
    n_bins: int = 10,
    method: str = "temperature",
) -> dict[str, dict[str, object]]:
    """Per binary head with labels on both splits: the temperature fitted on the selection split's (labels,
    probabilities) and the `method`'s map (`calibrator`: the temperature's by default), the held-out memes'
    calibration scores before and after that map, and every map's (`compared`), each fitted on the same memes. A head whose selection labels hold
    one class is left out: a temperature fitted there would only push every probability towards that class."""
    if method not in METHODS:
        raise ValueError(f"calibration must be one of {list(METHODS)}, not {method!r}")
    heads: dict[str, dict[str, object]] = {}
    for head, (y_val, p_val) in selection.items():
        if head not in held_out or len(np.unique(y_val)) < 2:
            continue
        y_test, p_test = held_out[head]
        fitted = {name: fit_calibrator(name, y_val, p_val) for name in METHODS}
        compared = {name: calibration_scores(y_test, apply_calibrator(p_test, m), n_bins) for name, m in fitted.items()}
        heads[head] = {
            "temperature": fitted["temperature"]["temperature"],
            "calibrator": fitted[method],
            "selection_memes": int(len(y_val)),
            "before": calibration_scores(y_test, p_test, n_bins),
            "after": compared[method],
            "compared": compared,  # every map's held-out scores, fitted on the same val memes
        }
    return heads
