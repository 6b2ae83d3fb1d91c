"""Learning-curve figures and text tables in the style of the paper's Figures 3 and 5 (no TensorFlow).

The figures are drawn on a `matplotlib.figure.Figure` with the Agg canvas, without pyplot, so importing
or using this module never changes the process-wide matplotlib backend.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from pbo_tf.analysis.report import format_cell
from pbo_tf.evaluation.stats import mean_and_ci
from pbo_tf.io import atomic_open

#: Display names of the algorithms; unknown names are shown as they are.
ALGORITHM_LABELS = {
    "fqi": "FQI",
    "profqi": "ProFQI",
    "profqi_inf": "ProFQI-inf",
    "profqi_chain": "ProFQI-chain",
    "profqi_lqr": "ProFQI-LQR",
    "oracle": "Oracle",
    "dqn": "DQN",
    "prodqn": "ProDQN",
    "ifqi": "i-FQI",
    "idqn": "i-DQN",
}

#: Metric-name endings for which a log-scale y axis is used automatically (when all values are > 0).
LOG_SCALE_SUFFIXES = ("error", "_l2", "rms")

_X_LABEL = "k (Bellman iterations / PBO applications)"

#: Per metric, the y-axis label and a one-line definition shown under the title, so that a figure reads
#: without the code. Unknown metrics are labelled by their name alone.
METRIC_LABELS: dict[str, tuple[str, str]] = {
    "J": (
        "J: count-weighted discounted return\nof the greedy policy of Q_k",
        "J = mean over the 17×17 grid of start states s of count(s)·V^π(s); count(s): dataset states in the "
        "cell, V^π(s): discounted return of a 100-step rollout of π = greedy(Q_k)",
    ),
    "J_normalised": (
        "J normalised: Σ count·V^π / Σ count",
        "the count-weighted mean over the 17×17 start states of the greedy policy's discounted return",
    ),
    "q_error": (
        "count-weighted error of Q_k:\n√mean count·(Q* − Q_k)²",
        "over the 17×17 grid of states and both actions; Q*: the exact optimum",
    ),
    "v_error": (
        "count-weighted error of V^π:\n√mean count·(V* − V^π)²",
        "over the 17×17 grid; π = greedy(Q_k), V*: the exact optimum",
    ),
    "q_error_rms": ("RMS error of Q_k: √mean (Q* − Q_k)²", "over the 20 states × 2 actions of the chain"),
    "param_error_l2": ("‖ω* − ω_k‖₂", "distance of Q_k's parameters to the optimal LQR parameters"),
    "p_error": ("|P* − P_k|", "error of the LQR value matrix of Q_k"),
    "balancing_time_s": ("balancing time (s)", "mean over rollouts of the greedy policy of Q_k"),
    "discounted_return": ("discounted return", "mean over rollouts of the greedy policy of Q_k"),
    "return": ("return (undiscounted)", "mean over rollouts of the greedy policy of Q_k"),
    "bellman_residual": (
        "held-out Bellman residual",
        "mean over held-out transitions of (r + γ(1 − done) max_a' Q_k(s', a') − Q_k(s, a))²",
    ),
}

#: Metrics that cannot be negative: their confidence bands are drawn from this floor up (a Student-t band
#: of a few seeds can reach below it).
METRIC_FLOORS = {"balancing_time_s": 0.0, "episode_length": 0.0}


#: Legend entries that `plot_curves`' ``figsize`` holds; each one more makes the figure
#: LEGEND_LINE_INCHES taller.
LEGEND_LINES_IN_FIGSIZE = 8
LEGEND_LINE_INCHES = 0.16

#: How the legend names a reference value: ``(words, symbol)``, e.g. "optimal policy (exact): J = 8.14".
REFERENCE_LABELS = {
    "optimal_J": ("optimal policy (exact)", "J"),
    "optimal_J_normalised": ("optimal policy (exact)", "J normalised"),
    "optimal_q_rms": ("error of Q = 0 (the RMS of Q*)", None),
}


def reference_line_label(key: str | None, value: float, n_seeds: int = 1) -> str:
    """Legend label of the reference line, in words where the key is known."""
    if key is None:
        return f"reference = {value:.3g}"
    words, symbol = REFERENCE_LABELS.get(key, (key, None))
    label = f"{words}: {symbol} = {value:.3g}" if symbol else f"{words} = {value:.3g}"
    if n_seeds > 1:
        label += f" (mean over the {n_seeds} seeds' datasets)"
    return label


def seeds_text(n: int) -> str:
    """``"1 seed"`` / ``"n seeds"``."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def budget_text(fractions: Sequence[float | None]) -> str | None:
    """How much of the paper's gradient-step budget runs had (``metrics["budget"]["fraction"]``), e.g.
    ``"0.91% of the paper's gradient steps"``; None if no run records it."""
    known = sorted({float(f"{f:.2g}") for f in fractions if f is not None and np.isfinite(f)})
    if not known:
        return None
    if known == [1.0]:
        return "the paper's gradient steps"

    def percent(f: float) -> str:
        return f"{100 * f:.2g}%"

    share = percent(known[0]) if len(known) == 1 else f"{percent(known[0])}–{percent(known[-1])}"
    return f"{share} of the paper's gradient steps"


def algorithm_label(algorithm: str) -> str:
    """Display name of an algorithm, e.g. ``"profqi"`` -> ``"ProFQI"``."""
    return ALGORITHM_LABELS.get(algorithm, algorithm)


def auto_log_y(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]], metric: str, reference: float | None = None
) -> bool:
    """Whether `plot_curves` uses a log-scale y axis when ``log_y`` is None.

    Args:
        groups: Output of `pbo_tf.analysis.results.group_curves`.
        metric: Metric name; it must end with ``"error"``, ``"_l2"`` or ``"rms"``.
        reference: Optional reference value, which must then be > 0 too.

    Returns:
        True if the metric name qualifies and every (non-missing) value, fixed-point value and the
        reference are strictly positive.
    """
    if not metric.endswith(LOG_SCALE_SUFFIXES):
        return False
    plotted = [np.ravel(np.asarray(group["values"], dtype=np.float64)) for group in groups.values()]
    plotted += [np.ravel(np.asarray(group.get("inf", []), dtype=np.float64)) for group in groups.values()]
    if reference is not None:
        plotted.append(np.asarray([reference], dtype=np.float64))
    values = np.concatenate(plotted) if plotted else np.zeros(0)
    values = values[~np.isnan(values)]
    return values.size > 0 and bool(np.all(values > 0))


def plot_curves(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]],
    metric: str,
    output_path: str,
    title: str | None = None,
    reference: float | None = None,
    log_y: bool | None = None,
    reference_label: str = "reference",
    confidence: float = 0.95,
    figsize: tuple[float, float] = (7.0, 5.0),
    dpi: int = 150,
    y_label: str | None = None,
    subtitle: str | None = None,
) -> str:
    """Plots one metric against k for every ``(env, algorithm, K)`` group and saves a PNG.

    The figure is `curves_figure`'s (see it for what is drawn and the other arguments).

    Args:
        output_path: PNG file to write; its parent folder is created. Written atomically.

    Returns:
        ``output_path``.

    Raises:
        ValueError: If ``groups`` is empty.
    """
    figure = curves_figure(
        groups,
        metric,
        title=title,
        reference=reference,
        log_y=log_y,
        reference_label=reference_label,
        confidence=confidence,
        figsize=figsize,
        dpi=dpi,
        y_label=y_label,
        subtitle=subtitle,
    )
    return _save_png(figure, output_path, dpi)


def curves_figure(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]],
    metric: str,
    title: str | None = None,
    reference: float | None = None,
    log_y: bool | None = None,
    reference_label: str = "reference",
    confidence: float = 0.95,
    figsize: tuple[float, float] = (7.0, 5.0),
    dpi: int = 150,
    y_label: str | None = None,
    subtitle: str | None = None,
) -> Figure:
    """The figure of one metric against k for every ``(env, algorithm, K)`` group.

    Each group is drawn as its mean over seeds, with a shaded Student-t confidence band where at least two
    seeds have a value (cut at `METRIC_FLOORS`' floor for a metric that cannot be negative); its legend
    entry gives its number of seeds and, when the runs record it, its share
    of the paper's gradient steps. A dashed vertical black line marks each distinct K (the number of
    iterations used in training), the fixed-point value (``"k": "inf"``), when present, is a dotted
    horizontal line of the group's colour, and ``reference`` (e.g. the optimal J) is a solid grey
    horizontal line. The legend sits below the axes and names each kind of line and the bands.

    Args:
        groups: Output of `pbo_tf.analysis.results.group_curves`.
        metric: Name of the plotted metric (y label, log-scale choice).
        title: Figure title; defaults to ``"<env(s)>: <metric>"``.
        reference: Optional value drawn as a horizontal reference line.
        log_y: Log-scale y axis; None chooses it when every plotted value is > 0 and ``metric`` ends with
            ``"error"``, ``"_l2"`` or ``"rms"``.
        reference_label: Legend label of the reference line.
        confidence: Confidence level of the shaded bands.
        figsize: Figure size in inches, legend of up to `LEGEND_LINES_IN_FIGSIZE` entries included (each
            entry past those adds `LEGEND_LINE_INCHES` to the height, so the axes keep theirs).
        dpi: Resolution; the PNG is ``figsize * dpi`` pixels (taller with a longer legend, see above).
        y_label: y-axis label; default `METRIC_LABELS`' label of ``metric`` (else its name).
        subtitle: smaller line under the title; default `METRIC_LABELS`' definition of ``metric``; ``""``
            for none.

    Returns:
        The `matplotlib.figure.Figure` (Agg canvas, not shown).

    Raises:
        ValueError: If ``groups`` is empty.
    """
    if not groups:
        raise ValueError(f"No curves to plot for metric {metric!r}")
    summaries = [_summarise(group, confidence) for group in groups.values()]

    if log_y is None:
        log_y = auto_log_y(groups, metric, reference)
    positive_floor = _positive_floor(summaries) if log_y else None

    figure = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = _colours(len(summaries))
    has_fixed_point = False
    # Distinct markers and dash patterns keep curves that coincide (e.g. FQI and the exact operator on a
    # tabular problem) visible.
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    dashes = ["-", "--", "-."]  # ":" is kept for fixed points
    has_band = False
    for index, (summary, colour) in enumerate(zip(summaries, colours, strict=True)):
        ks, mean, half_width = summary["ks"], summary["mean"], summary["half_width"]
        details = [seeds_text(summary["n_seeds"])]
        budget = budget_text(summary["budget_fractions"])
        if budget:
            details.append(budget)
        label = f"{algorithm_label(summary['algorithm'])}, K={summary['K']} ({'; '.join(details)})"
        valid = np.isfinite(mean)
        if np.any(valid):
            banded = valid & (summary["count"] >= 2)  # one seed has no interval: its mean alone
            lower, upper = mean[banded] - half_width[banded], mean[banded] + half_width[banded]
            if positive_floor is not None:
                lower = np.maximum(lower, positive_floor)
            if metric in METRIC_FLOORS:
                lower = np.maximum(lower, METRIC_FLOORS[metric])
            axes.plot(
                ks[valid],
                mean[valid],
                color=colour,
                linewidth=1.8,
                linestyle=dashes[index % len(dashes)],
                label=label,
                marker=markers[index % len(markers)] if np.sum(valid) <= 30 else None,
                markersize=4,
            )
            if np.any(banded):
                has_band = True
                axes.fill_between(ks[banded], lower, upper, color=colour, alpha=0.2, linewidth=0)
        else:  # Only a fixed-point value: keep the group in the legend.
            axes.plot([], [], color=colour, linewidth=1.8, label=label)
        if np.isfinite(summary["inf_mean"]):
            has_fixed_point = True
            axes.axhline(summary["inf_mean"], color=colour, linestyle=":", linewidth=1.8)

    for K in sorted({summary["K"] for summary in summaries}):
        axes.axvline(K, color="black", linestyle="--", linewidth=1.0)
        axes.annotate(
            f"K={K}",
            xy=(K, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )
    if reference is not None:
        axes.axhline(reference, color="dimgrey", linestyle="-", linewidth=1.2, label=reference_label)

    handles, labels = axes.get_legend_handles_labels()
    if has_band:
        handles.append(Patch(color="grey", alpha=0.25, linewidth=0))
        labels.append(f"shaded: {confidence:.0%} Student-t confidence interval of the mean over seeds")
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.0))
    labels.append("K: the Bellman iterations the method was trained with")
    if has_fixed_point:
        handles.append(Line2D([], [], color="grey", linestyle=":", linewidth=1.8))
        labels.append("fixed point of the learned operator (k = inf)")
    # The legend sits below the axes, one entry a line: past LEGEND_LINES_IN_FIGSIZE entries the figure grows
    # by a line's height for each, so that the axes keep their height (a study of 14 variants).
    extra_lines = max(0, len(labels) - LEGEND_LINES_IN_FIGSIZE)
    if extra_lines:
        figure.set_size_inches(figsize[0], figsize[1] + extra_lines * LEGEND_LINE_INCHES)
    figure.legend(handles, labels, fontsize=8, loc="outside lower center", ncols=1, frameon=False)
    if log_y:
        axes.set_yscale("log")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(_X_LABEL)
    default_label, default_subtitle = METRIC_LABELS.get(metric, (metric, ""))
    axes.set_ylabel(default_label if y_label is None else y_label)
    if title is None:
        envs = sorted({summary["env"] for summary in summaries})
        title = f"{', '.join(envs)}: {metric}"
    figure.suptitle(textwrap.fill(title, 70))  # a long title wraps instead of running off the figure
    subtitle = default_subtitle if subtitle is None else subtitle
    if subtitle:
        axes.set_title(textwrap.fill(subtitle, 100), fontsize=8)
    axes.grid(True, which="major", alpha=0.3)

    return figure


def plot_performance_profile(
    scores: Mapping[str, Sequence[float]],
    output_path: str,
    metric: str,
    title: str | None = None,
    higher_is_better: bool = True,
    points: int = 101,
    reps: int = 2000,
    seed: int = 0,
    dpi: int = 150,
) -> str:
    """A performance profile (rliable's score distribution, `pbo_tf.analysis.robust.performance_profile`):
    per algorithm, the fraction of its runs with a score above τ (below τ for a metric where lower is
    better) against τ over the range of every score, with the 95% stratified bootstrap band; written as a
    PNG (atomically).

    Args:
        scores: ``{algorithm: its runs' scores}`` (one task).
        output_path: the PNG to write.
        metric: the metric's name (the x axis).
        higher_is_better: the metric's direction.
        points: how many τ.
        reps, seed: the bootstrap's resamples and seed.

    Raises:
        ValueError: ``scores`` holds no score.
    """
    from pbo_tf.analysis import robust

    arrays = {name: np.asarray(v, np.float64) for name, v in scores.items() if len(v)}
    if not arrays:
        raise ValueError("no scores to draw a performance profile of")
    every = np.concatenate(list(arrays.values()))
    low, high = float(every.min()), float(every.max())
    pad = 0.05 * (high - low) if high > low else 1.0
    taus = np.linspace(low - pad, high + pad, points)
    sign = 1.0 if higher_is_better else -1.0
    figure = Figure(figsize=(6.0, 4.0))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    for (name, values), colour in zip(arrays.items(), _colours(len(arrays)), strict=True):
        profile, band = robust.performance_profile(sign * values, sign * taus, reps=reps, seed=seed)
        label = f"{algorithm_label(name)} ({seeds_text(values.size)})"
        axes.plot(taus, profile, color=colour, label=label)
        axes.fill_between(taus, band[0], band[1], color=colour, alpha=0.2, linewidth=0)
    word = ">" if higher_is_better else "<"
    axes.set_xlabel(f"τ ({metric})")
    axes.set_ylabel(f"fraction of runs with {metric} {word} τ")
    axes.set_ylim(-0.02, 1.02)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    if title:
        axes.set_title(textwrap.fill(title, 70), fontsize=10)
    figure.tight_layout()
    return _save_png(figure, output_path, dpi)


def _save_png(figure: Figure, output_path: str, dpi: int) -> str:
    """Writes the figure atomically (`pbo_tf.io.atomic_open`)."""
    with atomic_open(output_path, "wb") as f:
        figure.savefig(f, format="png", dpi=dpi)
    return output_path


def summary_table(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]],
    metric: str,
    ks: Sequence[int],
    confidence: float = 0.95,
) -> str:
    """Plain-text table of ``mean ± CI half width (n=seeds)`` over seeds at the requested ks.

    Each cell gives the number of seeds with a value there; a cell of one seed shows its value alone
    (``mean (n=1)``: one seed has no interval). A ``k=inf`` column (fixed point) is added when at least one
    group has such values. Cells without data show ``n/a``.

    Args:
        groups: Output of `pbo_tf.analysis.results.group_curves`.
        metric: Name of the metric (shown in the header line).
        ks: Values of k to tabulate.
        confidence: Confidence level of the half widths.

    Returns:
        The table, one line per group, columns aligned with spaces, without a trailing newline.
    """
    summaries = [_summarise(group, confidence) for group in groups.values()]
    columns: list[int | str] = [int(k) for k in ks]
    if any(np.isfinite(summary["inf_mean"]) for summary in summaries):
        columns.append("inf")
    header = ["env", "algorithm", "K", "seeds"] + [f"k={k}" for k in columns]
    rows = []
    for summary in summaries:
        row = [summary["env"], summary["algorithm"], str(summary["K"]), str(summary["n_seeds"])]
        for k in columns:
            if k == "inf":
                mean, half_width, count = summary["inf_mean"], summary["inf_half_width"], summary["inf_count"]
            else:
                index = np.flatnonzero(summary["ks"] == k)
                mean = summary["mean"][index[0]] if index.size else np.nan
                half_width = summary["half_width"][index[0]] if index.size else np.nan
                count = int(summary["count"][index[0]]) if index.size else 0
            row.append(format_cell(mean, half_width, count))
        rows.append(row)
    widths = [max(len(line[i]) for line in [header] + rows) for i in range(len(header))]
    lines = [
        f"{metric}: mean ± {confidence:.0%} Student-t CI half width over the n seeds with a value "
        "(n=1: the value alone)"
    ]
    for line in [header] + rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _summarise(group: Mapping[str, Any], confidence: float) -> dict[str, Any]:
    """Mean and CI half width of a group's curve and fixed-point values."""
    values = np.asarray(group["values"], dtype=np.float64)
    ks = np.asarray(group["ks"], dtype=np.int64)
    if values.shape[1:] != ks.shape:  # Also covers an empty curve stored as shape (n_seeds,).
        values = values.reshape(len(group["seeds"]), ks.size)
    mean, half_width = mean_and_ci(values, axis=0, confidence=confidence)
    inf_values = np.asarray(group.get("inf", np.full(len(group["seeds"]), np.nan)), dtype=np.float64)
    inf_mean, inf_half_width = mean_and_ci(inf_values, axis=0, confidence=confidence)
    return {
        "env": group["env"],
        "algorithm": group["algorithm"],
        "K": int(group["K"]),
        "n_seeds": len(group["seeds"]),
        "ks": ks,
        "mean": np.atleast_1d(mean),
        "half_width": np.atleast_1d(half_width),
        "inf_mean": float(inf_mean),
        "inf_half_width": float(inf_half_width),
        "count": np.atleast_1d(np.sum(~np.isnan(values), axis=0)),
        "inf_count": int(np.sum(~np.isnan(inf_values))),
        "budget_fractions": list(group.get("budget_fractions", [])),
    }


def _positive_floor(summaries: Sequence[Mapping[str, Any]]) -> float | None:
    """Lower clip of the bands on a log axis: a tenth of the smallest positive plotted mean."""
    means = np.concatenate([summary["mean"] for summary in summaries])
    positive = means[np.isfinite(means) & (means > 0)]
    return float(positive.min()) / 10.0 if positive.size else None


def _colours(n: int) -> list[Any]:
    """``n`` distinct colours: the tab10 cycle, then tab20 / a continuous map for more lines."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](x) for x in np.linspace(0.0, 0.95, n)]


def plot_policy_maps(
    maps: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]], output: str, **kwargs: Any
) -> str:
    """Writes `policy_maps_figure` (``kwargs``: its options) to the PNG ``output`` (atomically)."""
    return _save_png(policy_maps_figure(maps, **kwargs), output, 120)


def policy_maps_figure(
    maps: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]],
    action_labels: Sequence[str] = ("u = −4 (push left)", "u = +4 (push right)"),
    title: str | None = "Action of the greedy policy of Q_k in each state",
    axis_labels: tuple[str, str] = ("position p", "velocity v"),
) -> Figure:
    """The figure of greedy policies over a 2-D state grid side by side (paper Fig. 6 for car-on-hill).

    Each axis gets at most 5 ticks in a small font, so the panels' tick labels do not run into each other.

    Args:
      maps: ``(panel title, actions [n_x, n_y] int, x axis [n_x], y axis [n_y])`` per panel.
      action_labels: legend of the action indices.
      title: figure title (None for none).
      axis_labels: x and y axis labels.
    """
    from matplotlib.colors import ListedColormap

    if not maps:
        raise ValueError("no policy maps to plot")
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"][: len(action_labels)]
    cmap = ListedColormap(colours)
    fig = Figure(figsize=(4.2 * len(maps), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(maps), squeeze=False)
    for ax, (label, actions, x, y) in zip(axes[0], maps, strict=True):
        ax.imshow(
            np.asarray(actions).T,
            origin="lower",
            extent=(x[0], x[-1], y[0], y[-1]),
            aspect="auto",
            cmap=cmap,
            vmin=-0.5,
            vmax=len(action_labels) - 0.5,
            interpolation="nearest",
        )
        ax.set_title(label, fontsize=10)
        ax.set_xlabel(axis_labels[0])
        ax.set_ylabel(axis_labels[1])
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # at most 5 ticks: p ∈ [−1, 1] by 0.5
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.tick_params(labelsize=8)
    handles = [Patch(color=c, label=a) for c, a in zip(colours, action_labels, strict=True)]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize=9)
    if title:
        fig.suptitle(title)
    return fig
