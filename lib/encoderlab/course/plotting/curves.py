"""Lines over steps, depth, compute or sequence length n (Lessons 2–10).

Training runs (loss and learning curves, a metric against compute), measured speedups and ratios
against their ideal over n, similarity against distance, and values by depth (curves and the
distribution of norms). A series is styled by its role in the figure key: its name ("causal ...",
"bidirectional ...", "ideal ...") or an explicit ``role``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np

from encoderlab.attention import diagonal_stats
from encoderlab.course.plotting.common import (
    as_array,
    grid_and_title,
    new_axes,
    reference_levels,
)
from encoderlab.course.plotting.style import (
    COLORS,
    EXTRA_COLORS,
    FIGSIZES,
    LINESTYLES,
    MARKERS,
    SHADES,
    line_style,
    role_of,
)


def _finish_lines(ax, log2_xs, xlabel: str, ylabel: str, title: str | None,
                  y_from_zero: bool = False):
    """Axis labels, a y grid, the legend, and (given ``log2_xs``) a log2 x axis with a tick at
    every x: the common end of :func:`speedup_vs_ratio`, :func:`role_lines` and
    :func:`ratio_lines`. ``y_from_zero`` starts the y axis at 0."""
    if log2_xs is not None:
        ax.set_xscale("log", base=2)
        ax.set_xticks(log2_xs, labels=[str(x) for x in log2_xs])
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    if y_from_zero:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title, below=False)
    ax.legend()
    return ax


def _no_change(ax, level: float) -> None:
    """A thin grey line at the level where nothing changes (1× for a ratio, 0 for a cosine)."""
    ax.axhline(level, color=SHADES["baseline"], linewidth=0.8, zorder=0)


# --- Training runs ------------------------------------------------------------------------------


def _run_styles(names, styles: Mapping[str, dict] | None, **always):
    """(name, line keyword arguments) of each run: the style of the role its name implies (or
    the next colour without a role, solid), then ``always``, then ``styles[name]``."""
    extra = iter(EXTRA_COLORS * 4)
    for name in names:
        kwargs = line_style(name) or {"color": next(extra), "linestyle": "-"}
        kwargs.update(always)
        kwargs.update((styles or {}).get(name, {}))
        yield name, kwargs


def loss_curves(
    histories: Mapping[str, Sequence[float]],
    ax=None,
    xlabel: str = "step",
    ylabel: str = "loss",
    logy: bool = False,
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
):
    """One line per training run, styled by its name ("causal ..." dashed vermillion, ...).

    (Lesson 3, Figure 2; Lessons 5–8.) ``styles`` overrides keyword arguments per run;
    ``hlines`` draws dotted reference levels, e.g. ``{"chance: log V": 3.47}``. Returns the Axes.
    """
    ax = new_axes(ax, figsize=FIGSIZES["loss_curves"])
    for name, kwargs in _run_styles(histories, styles):
        values = as_array(histories[name])
        ax.plot(np.arange(len(values)), values, label=name, **kwargs)
    reference_levels(ax, hlines)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title, below=False)
    if histories or hlines:  # outside the plot, so it never hides a curve
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def learning_curves(
    curves: Mapping[str, tuple],
    ax=None,
    xlabel: str = "training step",
    ylabel: str = "held-out accuracy (%)",
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
    legend: str | None = "lower right",
):
    """Held-out score against training steps, one line with markers per run (Lesson 7, §3).

    ``curves`` maps a run's name to ``(steps, values)``; runs may be measured at different
    steps. ``hlines`` draws dotted reference levels, e.g. ``{"chance": 25}``. Returns the Axes.
    """
    if not curves:
        raise ValueError("learning_curves() needs at least one run, got none.")
    ax = new_axes(ax, figsize=FIGSIZES["learning_curves"])
    extra = iter([COLORS["encoder"], COLORS["library"], *EXTRA_COLORS] * 2)
    for name, pair in curves.items():
        if len(pair) != 2:
            raise ValueError(f"curve {name!r} must be a pair (steps, values), got "
                             f"{len(pair)} items.")
        xs, ys = as_array(pair[0]), as_array(pair[1])
        if xs.shape != ys.shape:
            raise ValueError(f"curve {name!r} has {xs.size} steps but {ys.size} values.")
        kwargs = {"color": next(extra), "linestyle": "-", "marker": MARKERS["measured"],
                  "markersize": 4}
        kwargs.update((styles or {}).get(name, {}))
        ax.plot(xs, ys, label=name, **kwargs)
    reference_levels(ax, hlines)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title)
    if legend:
        ax.legend(loc=legend)
    return ax


def metric_vs_compute(
    series: Mapping[str, tuple],
    ax=None,
    xlabel: str = "training compute (PFLOP)",
    ylabel: str = "held-out probe accuracy",
    hlines: Mapping[str, float] | None = None,
    styles: Mapping[str, dict] | None = None,
    title: str | None = None,
):
    """A measured metric against training compute, one line of markers per run (Lesson 6, §6).

    ``series`` maps a run's name to ``(x, y)`` sequences (e.g. cumulative FLOPs and probe
    accuracy at each probe); ``hlines`` draws dotted reference levels. Returns the Axes.
    """
    if not series:
        raise ValueError("metric_vs_compute() needs at least one series, got none.")
    ax = new_axes(ax, figsize=FIGSIZES["metric_vs_compute"])
    for name, kwargs in _run_styles(series, styles, marker=MARKERS["measured"]):
        xs, ys = series[name]
        ax.plot(as_array(xs), as_array(ys), label=name, **kwargs)
    reference_levels(ax, hlines)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title, below=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


# --- Over the sequence length n: speedups and ratios against their ideal ------------------------


def speedup_vs_ratio(
    ns,
    measured,
    ideal,
    ax=None,
    label: str = "measured",
    ideal_label: str = "ideal",
    recorded: bool = False,
    xlabel: str = "sequence length n",
    ylabel: str = "speedup (×)",
    title: str | None = None,
):
    """Measured speedups (markers) against the ideal (dotted) over n on a log2 axis (Lesson 3, §4).

    ``measured`` is one list of speedups, or a dict {label: speedups} for several devices;
    ``ideal`` is a number (e.g. 2.0) or one value per n. ``recorded=True`` draws open squares
    (numbers read from figures/data/) instead of filled circles. Returns the Axes.
    """
    ns = [int(n) for n in ns]
    ax = new_axes(ax, figsize=FIGSIZES["speedup_vs_ratio"])
    ideal_values = np.broadcast_to(as_array(ideal), (len(ns),))
    ax.plot(ns, ideal_values, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
            linewidth=1.5, label=ideal_label)
    _no_change(ax, 1.0)  # 1× = no speedup
    series = measured if isinstance(measured, Mapping) else {label: measured}
    colors = iter([COLORS["library"]] + EXTRA_COLORS)
    for name, values in series.items():
        color = next(colors)
        marker = MARKERS["recorded"] if recorded else MARKERS["measured"]
        ax.plot(ns, as_array(values), linestyle="-", linewidth=0.8, color=color, marker=marker,
                markersize=6, markerfacecolor=SHADES["paper"] if recorded else color, label=name)
    return _finish_lines(ax, ns, xlabel, ylabel, title, y_from_zero=True)


def gpu_speedups(record, ax=None, recorded: bool = True):
    """One GPU run's speedups full / causal, SDPA and the Triton kernel, over n (Lesson 9, §8).

    ``record`` is a dict of :func:`encoderlab.course.bench.gpu_attention_record` (this run,
    ``recorded=False``: filled circles) or of :func:`encoderlab.course.bench.recorded_gpu_results`
    (``recorded=True``: open squares). The dotted line is the tile-count ratio 2T/(T+1);
    the title names the device and the date. Returns the Axes.
    """
    rows = record["rows"]
    return speedup_vs_ratio(
        [row["n"] for row in rows],
        {"SDPA, is_causal": [row["sdpa_speedup"] for row in rows],
         "Triton kernel, tiles skipped": [row["triton_speedup"] for row in rows]},
        ideal=[row["tile_ratio"] for row in rows],
        ideal_label=f"ideal: tiles 2T/(T+1), block {record.get('block', 64)}",
        ax=ax,
        recorded=recorded,
        ylabel="time full / time causal",
        title=f"{record['device']}, {record.get('dtype', 'float16')} ({record['date']})",
    )


def _role_spec(label: str, spec: Mapping, n_x: int):
    """The values, role and marker of one series of :func:`role_lines` / :func:`ratio_lines`."""
    values = as_array(spec["values"])
    role = spec["role"]
    if len(values) != n_x or role not in COLORS:
        raise ValueError(
            f"series {label!r} needs one value per x ({n_x}) and a role of the figure "
            f"key {sorted(COLORS)}; got {len(values)} values and {role!r}.")
    return values, role, spec.get("marker", "measured")


def role_lines(xs, series: Mapping[str, Mapping], ax=None, xlabel: str = "sequence length n",
               ylabel: str = "", title: str | None = None, log2_x: bool = True):
    """Curves over x in the key's colours, line styles and markers (Lesson 9, Figures 3–5).

    ``series`` maps a label to a dict with ``values`` (one per x), ``role`` (a key of
    :data:`COLORS`), optionally ``style`` (a key of :data:`LINESTYLES`: "theory" draws the
    dotted line of a formula; default solid) and ``marker`` (a key of :data:`MARKERS`, or
    None for no marker; default "measured", the filled circle). ``log2_x`` puts x on a log2
    axis with a tick at every x. Returns the Axes.
    """
    xs = list(xs)
    ax = new_axes(ax, figsize=FIGSIZES["role_lines"])
    for label, spec in series.items():
        values, role, marker = _role_spec(label, spec, len(xs))
        ax.plot(xs, values, color=COLORS[role],
                linestyle=LINESTYLES[spec.get("style", "encoder")], linewidth=1.5,
                marker=MARKERS[marker] if marker else None, markersize=5,
                markerfacecolor=SHADES["paper"] if marker == "recorded" else COLORS[role],
                label=label)
    return _finish_lines(ax, xs if log2_x else None, xlabel, ylabel, title)


def ratio_lines(
    xs,
    series: Mapping[str, Mapping],
    ax=None,
    xlabel: str = "sequence length n",
    ylabel: str = "ratio",
    title: str | None = None,
):
    """Medians with their spread as error bars over n, on a log2 x axis (Lesson 3, Figure 3).

    ``series`` maps a label to a dict with ``values`` (one median per x), ``role`` (a key of
    :data:`COLORS`) and optionally ``low`` and ``high`` (the lowest and highest sample per x,
    drawn as error bars), ``style`` (a key of :data:`LINESTYLES`; "theory" draws a formula's
    dotted line) and ``marker`` (a key of :data:`MARKERS`, or None; default "measured").
    A thin grey line marks 1 (no difference). Returns the Axes.
    """
    xs = list(xs)
    ax = new_axes(ax, figsize=FIGSIZES["ratio_lines"])
    _no_change(ax, 1.0)  # ratio 1: no difference
    for k, (label, spec) in enumerate(series.items()):
        values, role, marker = _role_spec(label, spec, len(xs))
        errors = None
        if "low" in spec and "high" in spec:
            low, high = as_array(spec["low"]), as_array(spec["high"])
            errors = np.vstack([values - low, high - values])  # (2, len(xs)), both >= 0
        # measured series sit side by side, a few per cent apart, so their bars do not overlap
        shift = 1.0 if errors is None else 1.0 + 0.03 * (k - (len(series) - 1) / 2)
        ax.errorbar(np.asarray(xs, dtype=float) * shift, values, yerr=errors,
                    color=COLORS[role], linestyle=LINESTYLES[spec.get("style", "encoder")],
                    linewidth=1.5, capsize=3, elinewidth=1.0,
                    marker=MARKERS[marker] if marker else None, markersize=5,
                    markerfacecolor=SHADES["paper"] if marker == "recorded" else COLORS[role],
                    label=label)
    return _finish_lines(ax, xs, xlabel, ylabel, title)


# --- Similarity against distance (Lesson 2) -----------------------------------------------------


def similarity_by_offset(
    matrix,
    ax=None,
    max_offset: int | None = None,
    title: str | None = None,
    label: str = "mean over pairs (i, i+k)",
    band: bool = True,
    logx: bool = False,
    xlabel: str = "offset k = j − i",
    ylabel: str = "cosine similarity",
):
    """Similarity against distance: the mean of each diagonal of ``matrix`` (Lesson 2, §5).

    A solid line in the encoder's colour for the mean over all pairs k apart, with a light band
    from the smallest to the largest pair when ``band`` is True, and a grey line at 0. Offsets
    start at k = 1 (k = 0 is each vector with itself). The legend sits in the lower left, which
    suits similarities that start high at small k. Returns the Axes.
    """
    stats = diagonal_stats(matrix)  # offset, mean, min, max of each diagonal k
    n = len(stats["offset"])
    if n < 2:
        raise ValueError("similarity_by_offset needs at least 2 × 2 entries, got a 1 × 1 matrix.")
    last = n - 1 if max_offset is None else int(max_offset)
    if not 1 <= last <= n - 1:
        raise ValueError(f"max_offset must lie in 1..{n - 1} for a {n} × {n} matrix, got {last}.")
    k = slice(1, last + 1)
    ax = new_axes(ax, figsize=FIGSIZES["similarity_by_offset"])
    color = COLORS["encoder"]
    if band:
        ax.fill_between(stats["offset"][k], stats["min"][k], stats["max"][k], color=color,
                        alpha=0.16, linewidth=0, label="min to max over pairs")
    ax.plot(stats["offset"][k], stats["mean"][k], color=color, linestyle=LINESTYLES["encoder"],
            linewidth=1.4, label=label)
    _no_change(ax, 0.0)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlim(1, last)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title, below=False)
    ax.legend(loc="lower left")  # below the band at small k, where nothing is drawn
    return ax


# --- By depth (Lesson 4) ------------------------------------------------------------------------


def _plain_log_labels(ax) -> None:
    """Log-scale y labels as plain numbers (0.2, not 2 x 10^-1); on short ranges some minor
    ticks are labelled too: 2, 3, 4, 5, 6, 8 x 10^k within one decade, 2, 3, 5 within 1.5."""

    def major(v, _):
        return f"{v:g}"

    def minor(v, _):
        low, high = ax.get_ylim()
        if v <= 0 or low <= 0 or high / low > 10**1.5:
            return ""
        leading = round(v / 10 ** np.floor(np.log10(v)))
        shown = (2, 3, 4, 5, 6, 8) if high / low <= 10 else (2, 3, 5)
        return f"{v:g}" if leading in shown else ""

    ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(major))
    ax.yaxis.set_minor_formatter(mpl.ticker.FuncFormatter(minor))


def depth_curves(
    series: Mapping[str, Sequence[float]],
    x=None,
    ax=None,
    xlabel: str = "layer l",
    ylabel: str = "",
    styles: Mapping[str, dict] | None = None,
    hlines: Mapping[str, float] | None = None,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    legend: str | None = "best",
):
    """Measured values by depth (or by number of layers), one line with markers per series.

    (Lesson 4, §6–§7.) A series whose name says "theory", "ideal" or "formula" is drawn dotted
    black without markers, as the figure key asks; ``styles`` overrides keyword arguments per
    series; ``hlines`` draws dotted reference levels. ``x`` defaults to 1, 2, ... Returns the Axes.
    """
    if not series:
        raise ValueError("depth_curves() needs at least one series, got none.")
    ax = new_axes(ax, figsize=FIGSIZES["depth_curves"])
    extra = iter(EXTRA_COLORS * 4)
    for name, values in series.items():
        values = as_array(values)
        xs = np.arange(1, len(values) + 1) if x is None else as_array(x)
        if xs.shape != values.shape:
            raise ValueError(
                f"series {name!r} has {values.shape[0]} values but x has {xs.shape[0]}."
            )
        kwargs = line_style(name)
        if role_of(name) != "theory":
            kwargs = {"color": next(extra), "linestyle": "-", **kwargs}
            kwargs.update(marker=MARKERS["measured"], markersize=5)
        kwargs.update((styles or {}).get(name, {}))
        ax.plot(xs, values, label=name, **kwargs)
    reference_levels(ax, hlines)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    if x is not None:
        ax.set_xticks(as_array(x))
    else:
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    if logy:
        ax.set_yscale("log")
        _plain_log_labels(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title)
    if legend:
        ax.legend(loc=legend)
    return ax


def norms_by_layer(
    norms,
    ax=None,
    marks: Mapping[str, Sequence[float]] | None = None,
    title: str | None = None,
    ylabel: str = "norm of the token vector $\\|h_i^{(l)}\\|$",
):
    """The distribution of token-vector norms at each depth, as box plots (Lesson 4, §6).

    ``norms`` has shape (L + 1, number of tokens) (``inspect_stack.residual_norms``): column 0
    of the x axis is H^(0), the embeddings. ``marks`` adds one line per named group (e.g. the mean
    norm of the [CLS] tokens), each with L + 1 values. Returns the Axes.
    """
    v = as_array(norms)
    if v.ndim != 2 or v.shape[0] < 1:
        raise ValueError(
            f"norms_by_layer needs a (depths, tokens) array, got shape {v.shape}: pass "
            "inspect_stack.residual_norms(out.hidden_states, attention_mask)."
        )
    depths = v.shape[0]
    ax = new_axes(ax, figsize=FIGSIZES["norms_by_layer"])
    ax.boxplot(
        list(v), positions=range(depths), widths=0.5, patch_artist=True,
        medianprops={"color": COLORS["reference"], "linewidth": 1.2},
        boxprops={"facecolor": SHADES["encoder_box"], "edgecolor": COLORS["encoder"]},
        whiskerprops={"color": COLORS["encoder"]}, capprops={"color": COLORS["encoder"]},
        flierprops={"marker": ".", "markersize": 3, "markeredgecolor": SHADES["outlier"]},
    )
    # colours without a role of their own: [CLS] in sky blue, [SEP] in grey, as in §6's figures
    colors = iter([EXTRA_COLORS[0], EXTRA_COLORS[3], EXTRA_COLORS[2], EXTRA_COLORS[1]])
    markers = iter(["D", "^", "v", "P"])
    for name, values in (marks or {}).items():
        values = as_array(values)
        if values.shape != (depths,):
            raise ValueError(
                f"marks[{name!r}] needs one value per depth, shape ({depths},), got {values.shape}."
            )
        ax.plot(range(depths), values, linestyle="-", linewidth=1.0, marker=next(markers),
                markersize=5, color=next(colors), label=name)
    ax.set_xticks(range(depths), labels=["$H^{(0)}$"] + [str(l) for l in range(1, depths)])
    ax.set_xlabel("depth: embeddings, then after block l")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    grid_and_title(ax, title)
    if marks:
        ax.legend(loc="lower right")
    return ax
