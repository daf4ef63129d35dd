"""Bars with their values written on them, and draws against their targets (Lessons 3–9).

Grouped bars (timings, accuracies, recalls, fractions by role), horizontal bars (parameter
shares, labelled values, the k most probable tokens), measured shares against their targets,
and each draw of a random procedure against the band that noise alone allows.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from encoderlab.course.plotting.common import as_array, field, grid_and_title, new_axes
from encoderlab.course.plotting.style import (
    COLORS,
    EXTRA_COLORS,
    FIGSIZES,
    FONT_SIZES,
    LINESTYLES,
    MARKERS,
    MAX_FIGURE_WIDTH,
    RECALL_COLORS,
    SHADES,
    column_width,
    role_of,
    use_style,
)
from encoderlab.validate import check_positive_int


def _check_role(role: str) -> None:
    if role not in COLORS:
        raise ValueError(f"role must be one of {list(COLORS)}, got {role!r}.")


# --- Grouped bars -------------------------------------------------------------------------------


def timing_bars(
    rows,
    ax=None,
    x: str = "n",
    group: str = "mask",
    value: str = "ms",
    err: str | None = None,
    xlabel: str | None = None,
    ylabel: str = "time (ms)",
    title: str | None = None,
    fmt: str = "{:.3g}",
    logy: bool = False,
):
    """Grouped bars of timings with their values written on top (Lesson 3, Figure 3; Lesson 9).

    ``rows`` are dicts (or objects) with fields ``x`` (one bar group each, e.g. the length n),
    ``group`` (one bar per group member, e.g. "full" / "causal") and ``value`` (the height);
    ``err`` names an optional error-bar field. Returns the Axes.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("timing_bars() needs at least one row, got none.")
    xs = list(dict.fromkeys(field(r, x) for r in rows))  # in first-seen order
    groups = list(dict.fromkeys(field(r, group) for r in rows))
    ax = new_axes(ax, figsize=(column_width(max(4.5, 1.1 * len(xs) * len(groups) ** 0.5 + 2)),
                                 3.4))
    width = 0.8 / len(groups)
    extra = iter(EXTRA_COLORS * 4)
    for g_index, g in enumerate(groups):
        by_x = {field(r, x): r for r in rows if field(r, group) == g}
        positions = [k + (g_index - (len(groups) - 1) / 2) * width for k, v in enumerate(xs)
                     if v in by_x]
        heights = [float(field(by_x[v], value)) for v in xs if v in by_x]
        errors = [float(field(by_x[v], err)) for v in xs if v in by_x] if err else None
        role = role_of(str(g))
        color = COLORS[role] if role in COLORS else next(extra)
        bars = ax.bar(positions, heights, width=width * 0.92, color=color, label=str(g),
                      yerr=errors, error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=FONT_SIZES["small"],
                     padding=2)
    ax.set_xticks(range(len(xs)), labels=[str(v) for v in xs])
    ax.set_xlabel(xlabel if xlabel is not None else x)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    else:
        ax.margins(y=0.12)  # room for the value labels
    grid_and_title(ax, title)
    ax.legend(title=group if len(groups) > 1 else None)
    return ax


def accuracy_bars(
    results: Mapping[str, Mapping[str, float]],
    ax=None,
    ylabel: str = "accuracy",
    title: str | None = None,
    fmt: str = "{:.0%}",
    ylim: tuple[float, float] = (0.0, 1.0),
    colors: Mapping[str, str] | None = None,
):
    """Grouped bars: ``results[group][series]``, e.g. {"early blanks": {"MLM encoder": 0.4, ...}}.

    (Lesson 5, §4.) One group of bars per blank set, one bar per model, coloured by the model's
    role (an "encoder"/"bidirectional" name blue, a "decoder"/"causal" name vermillion, or
    ``colors[name]``) and labelled with its value. Returns the Axes.
    """
    groups = list(results)
    if not groups:
        raise ValueError("accuracy_bars() needs at least one group, got none.")
    series = list(dict.fromkeys(name for g in groups for name in results[g]))
    ax = new_axes(ax, figsize=(column_width(max(4.5, 1.6 * len(groups) + 1.5)), 3.4))
    width = 0.8 / len(series)
    extra = iter(EXTRA_COLORS * 4)
    for s_index, name in enumerate(series):
        xs = [k + (s_index - (len(series) - 1) / 2) * width for k, g in enumerate(groups)
              if name in results[g]]
        heights = [float(results[g][name]) for g in groups if name in results[g]]
        role = role_of(name)
        color = COLORS[role] if role in ("encoder", "decoder", "cross") else next(extra)
        color = (colors or {}).get(name, color)
        bars = ax.bar(xs, heights, width=width * 0.92, color=color, label=name)
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=FONT_SIZES["cell"],
                     padding=2)
    ax.set_xticks(range(len(groups)), labels=groups)
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    grid_and_title(ax, title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax


def recall_bars(
    results: Mapping[str, Mapping[str, float]],
    ax=None,
    title: str | None = None,
    ylabel: str = "share of queries",
    ylim: tuple[float, float] = (0.0, 1.0),
    legend: str | None = "upper right",
):
    """Grouped bars: one group per method (``results``' keys), one bar per metric (Lesson 8, §3).

    ``results`` maps a method to its metrics, e.g. ``{"mean": {"recall@1": 0.59, "recall@5":
    0.82}, ...}``; every method must have the same metrics. Each bar has its value written on it
    (gid "value"). Returns the Axes.
    """
    if not results:
        raise ValueError("recall_bars() needs at least one method, got none.")
    metrics = list(next(iter(results.values())))
    for method, values in results.items():
        if list(values) != metrics:
            raise ValueError(
                f"every method needs the same metrics {metrics}; {method!r} has {list(values)}."
            )
    ax = new_axes(ax, figsize=(column_width(1.2 + 1.15 * len(results)), 3.3))
    width = 0.8 / len(metrics)
    centres = np.arange(len(results))
    for k, metric in enumerate(metrics):
        xs = centres - 0.4 + width * (k + 0.5)
        values = [float(v[metric]) for v in results.values()]
        color = RECALL_COLORS[k % len(RECALL_COLORS)]
        ax.bar(xs, values, width=width * 0.92, color=color, label=metric, zorder=2)
        for x, v in zip(xs, values):
            ax.text(x, v + 0.015 * (ylim[1] - ylim[0]), f"{v:.2f}", ha="center", va="bottom",
                    fontsize=FONT_SIZES["cell"], gid="value")
    ax.set_xticks(centres, labels=list(results))
    ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title)
    if legend:
        ax.legend(loc=legend, ncols=len(metrics))
    return ax


def role_bars(categories: Sequence[str], series: Mapping[str, tuple], ax=None,
              ylabel: str = "", xlabel: str = "", title: str | None = None,
              fmt: str = "{:.2f}", hatch: Mapping[str, str] | None = None):
    """Grouped bars, one group per category, one bar per series, each series in the colour of
    its role in the figure key (Lesson 9, Figure 2).

    ``series`` maps a label to ``(values, role)``: one value per category, and a key of
    :data:`COLORS` ("reference" for a count or formula, "library" for a measurement of the
    course library). ``hatch`` optionally maps a label to a hatch pattern, so that two series
    never differ by colour alone. Values are written on the bars. Returns the Axes.
    """
    categories = list(categories)
    if not categories or not series:
        raise ValueError("role_bars() needs at least one category and one series, got "
                         f"{len(categories)} and {len(series)}.")
    for label, (values, role) in series.items():
        if len(values) != len(categories) or role not in COLORS:
            raise ValueError(
                f"series {label!r} needs one value per category ({len(categories)}) and a role "
                f"of the figure key {sorted(COLORS)}; got {len(values)} values and {role!r}.")
    ax = new_axes(ax, figsize=FIGSIZES["role_bars"])
    width = 0.8 / len(series)
    for s_index, (label, (values, role)) in enumerate(series.items()):
        positions = [k + (s_index - (len(series) - 1) / 2) * width for k in range(len(categories))]
        # a black bar would hide its label: the reference is drawn as an outline on paper
        face = COLORS[role] if role != "reference" else SHADES["paper"]
        bars = ax.bar(positions, [float(v) for v in values], width=width * 0.92, color=face,
                      edgecolor=COLORS[role], linewidth=1.0,
                      hatch=(hatch or {}).get(label), label=label)
        ax.bar_label(bars, labels=[fmt.format(float(v)) for v in values],
                     fontsize=FONT_SIZES["cell"], padding=2)
    ax.set_xticks(range(len(categories)), labels=categories)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.15)  # room for the value labels
    grid_and_title(ax, title)
    ax.legend()
    return ax


# --- Horizontal bars ----------------------------------------------------------------------------


def _short_count(count: int) -> str:
    """1234567 -> '1.23M', 98304 -> '98.3k', 768 -> '768'."""
    if count >= 1e6:
        return f"{count / 1e6:.2f}M"
    if count >= 1e3:
        return f"{count / 1e3:.1f}k"
    return str(count)


def parameter_bars(
    breakdowns: Mapping[str, Mapping[str, int]],
    ax=None,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
):
    """Each model's parameters by part, as shares of its total, side by side (Lesson 4, §5).

    ``breakdowns`` maps a model's name to its parts (``inspect_stack.parameter_breakdown``); a
    part a model lacks counts as 0. Each bar is labelled with its share and its count.
    Returns the Axes.
    """
    if not breakdowns:
        raise ValueError("parameter_bars() needs at least one model's breakdown, got none.")
    models = list(breakdowns)
    parts = list(dict.fromkeys(p for b in breakdowns.values() for p in b))
    totals = {m: sum(breakdowns[m].values()) for m in models}
    if any(t <= 0 for t in totals.values()):
        raise ValueError(f"every breakdown needs a positive total, got {totals}.")
    ax = new_axes(ax, figsize=(MAX_FIGURE_WIDTH,
                               0.36 * len(parts) * max(1, len(models)) ** 0.5 + 1.2))
    default = [COLORS["encoder"], EXTRA_COLORS[0], EXTRA_COLORS[3], EXTRA_COLORS[2]]
    height = 0.8 / len(models)
    for k, model in enumerate(models):
        shares = [100 * breakdowns[model].get(p, 0) / totals[model] for p in parts]
        counts = [breakdowns[model].get(p, 0) for p in parts]
        ys = [i + (k - (len(models) - 1) / 2) * height for i in range(len(parts))]
        color = (colors or {}).get(model, default[k % len(default)])
        bars = ax.barh(ys, shares, height=height * 0.9, color=color,
                       label=f"{model}: {totals[model]:,} parameters")
        labels = [f"{s:.1f}% · {_short_count(c)}" if c else "—" for s, c in zip(shares, counts)]
        ax.bar_label(bars, labels=labels, fontsize=FONT_SIZES["small"], padding=2)
    ax.set_yticks(range(len(parts)), labels=parts)
    ax.invert_yaxis()  # the first part on top, as in the table
    ax.set_xlabel("share of the model's parameters (%)")
    ax.set_xlim(0, 100)
    grid_and_title(ax, title, axis="x")
    ax.legend(loc="lower right")
    return ax


def labelled_bars(
    values: Mapping[str, float],
    ax=None,
    xlabel: str = "",
    fmt: str = "{:.2f}",
    colors: Mapping[str, str] | None = None,
    lines: Mapping[str, float] | None = None,
    xlim: tuple[float, float] | None = None,
    title: str | None = None,
):
    """Horizontal bars, one per name, each labelled with its value (Lesson 6, Figures 3 and 5).

    ``colors`` picks a bar's colour by name (default: the encoder's blue); ``lines`` draws
    dotted vertical reference levels, e.g. ``{"chance": 0.5}``. Returns the Axes.
    """
    if not values:
        raise ValueError("labelled_bars() needs at least one value, got none.")
    names = list(values)
    heights = [float(values[k]) for k in names]
    ax = new_axes(ax, figsize=(MAX_FIGURE_WIDTH, 0.45 * len(names) + 1.0))
    face = [(colors or {}).get(k, COLORS["encoder"]) for k in names]
    bars = ax.barh(range(len(names)), heights, color=face, height=0.62)
    ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=FONT_SIZES["cell"],
                 padding=3)
    for label, level in (lines or {}).items():
        ax.axvline(level, color=COLORS["reference"], linestyle=LINESTYLES["theory"],
                   linewidth=1.2, label=label)
    ax.set_yticks(range(len(names)), labels=names)
    ax.invert_yaxis()  # the first name on top
    ax.set_xlabel(xlabel)
    if xlim is not None:
        ax.set_xlim(*xlim)
    else:
        ax.set_xlim(0, max(heights) * 1.18 if max(heights) > 0 else 1)
    grid_and_title(ax, title, axis="x")
    if lines:
        ax.legend(loc="lower right")
    return ax


def top_k_bars(panels: Sequence[Mapping], ncols: int = 2, xlabel: str = "probability",
               suptitle: str | None = None):
    """The k most probable tokens for a hidden position, one small panel each (Lesson 5, §3).

    Each panel is a mapping with ``tokens`` and ``probs`` (most probable first), a ``title``
    (e.g. the sentence with the blank), an optional ``answer`` (its bar is drawn in the
    highlight colour and outlined) and an optional ``role`` ("encoder" or "decoder") for the
    other bars' colour. Returns the Figure.
    """
    panels = list(panels)
    if not panels:
        raise ValueError("top_k_bars() needs at least one panel, got none.")
    check_positive_int(ncols, "ncols")
    for i, panel in enumerate(panels):
        if len(panel.get("tokens", ())) != len(panel.get("probs", ())) or not panel.get("tokens"):
            raise ValueError(
                f"panel {i} needs 'tokens' and 'probs' of the same non-zero length, got "
                f"{len(panel.get('tokens', ()))} tokens and {len(panel.get('probs', ()))} "
                "probabilities."
            )
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    k_max = max(len(p["tokens"]) for p in panels)
    use_style()
    panel_width = min(4.3, MAX_FIGURE_WIDTH / ncols)  # the figure fits the column
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_width * ncols,
                                                    (0.28 * k_max + 1.1) * nrows),
                             layout="constrained", squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        panel = panels[i]
        tokens, probs = list(panel["tokens"]), [float(p) for p in panel["probs"]]
        base = COLORS.get(panel.get("role", "encoder"), COLORS["encoder"])
        colors = [COLORS["highlight"] if t == panel.get("answer") else base for t in tokens]
        bars = ax.barh(range(len(tokens)), probs, color=colors, height=0.7)
        for bar, token in zip(bars, tokens, strict=True):
            if token == panel.get("answer"):
                bar.set_edgecolor(COLORS["reference"])
                bar.set_linewidth(1.2)
        ax.bar_label(bars, labels=[f"{p:.2f}" for p in probs], fontsize=FONT_SIZES["small"],
                     padding=2)
        ax.set_yticks(range(len(tokens)), labels=tokens)
        ax.invert_yaxis()  # the most probable on top
        ax.set_xlim(0, 1.0)
        ax.set_xlabel(xlabel)
        ax.grid(axis="x")
        ax.set_axisbelow(True)
        if panel.get("title"):
            # characters per line, about: the panel less its tick labels
            chars = int((panel_width - 0.8) * 72 / (0.6 * FONT_SIZES["panel"]))
            ax.set_title(textwrap.fill(str(panel["title"]), chars), fontsize=FONT_SIZES["panel"],
                         loc="left")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


# --- Measured against a target ------------------------------------------------------------------


def target_bars(
    measured: Mapping[str, float],
    targets: Mapping[str, float],
    ax=None,
    ylabel: str = "share",
    title: str | None = None,
    fmt: str = "{:.3f}",
    role: str = "library",
):
    """Measured shares as bars, each with its target as a dotted black bar top (Lesson 5, §1).

    ``measured`` and ``targets`` map the same names (e.g. ``"[MASK]"``, ``"random"``,
    ``"unchanged"``) to numbers; each bar is labelled with its value, and the target with a
    dotted line across the bar. ``role`` picks the bars' colour. Returns the Axes.
    """
    names = list(measured)
    if not names:
        raise ValueError("target_bars() needs at least one measured value, got none.")
    missing = [name for name in names if name not in targets]
    if missing:
        raise ValueError(f"targets has no value for {missing}; give one target per bar.")
    _check_role(role)
    ax = new_axes(ax, figsize=(column_width(0.9 * len(names) + 2.2), 3.2))
    heights = [float(measured[name]) for name in names]
    bars = ax.bar(range(len(names)), heights, width=0.6, color=COLORS[role], label="measured")
    ax.bar_label(bars, labels=[fmt.format(h) for h in heights], fontsize=FONT_SIZES["cell"],
                 padding=2)
    for k, name in enumerate(names):
        ax.plot([k - 0.42, k + 0.42], [targets[name]] * 2, color=COLORS["reference"],
                linestyle=LINESTYLES["theory"], linewidth=1.6,
                label="target" if k == 0 else None)
    ax.set_xticks(range(len(names)), labels=names)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(heights + [float(targets[n]) for n in names]) * 1.2 or 1.0)
    grid_and_title(ax, title)
    ax.legend(loc="upper right")
    return ax


def draws_around_target(
    draws: Mapping[str, Sequence[float]],
    targets: Mapping[str, float],
    sds: Mapping[str, float],
    ax=None,
    ylabel: str = "measured - target (percentage points)",
    title: str | None = None,
    role: str = "encoder",
):
    """One column per share: each draw's deviation from its target as a dot, and the band of
    ±2 standard deviations that binomial sampling alone allows (Lesson 5, Figure 1).

    ``draws[name]`` holds one measured share per draw, ``targets[name]`` the share the procedure
    aims at, ``sds[name]`` the binomial standard deviation of one draw's share (all as fractions;
    the axis shows percentage points). Dots inside the grey band are what a correct
    implementation produces; a biased one sits outside it. Returns the Axes.
    """
    names = list(draws)
    if not names:
        raise ValueError("draws_around_target() needs at least one series of draws, got none.")
    missing = [n for n in names if n not in targets or n not in sds]
    if missing:
        raise ValueError(f"targets and sds need a value for every series; missing for {missing}.")
    _check_role(role)
    ax = new_axes(ax, figsize=(column_width(1.3 * len(names) + 2.2), 3.2))
    for k, name in enumerate(names):
        values = (as_array(draws[name]) - float(targets[name])) * 100  # (draws,) in points
        if values.ndim != 1 or values.size == 0:
            raise ValueError(f"draws[{name!r}] must be a non-empty list of shares.")
        band = 2 * float(sds[name]) * 100
        ax.fill_between([k - 0.35, k + 0.35], -band, band, color=SHADES["noise_band"],
                        linewidth=0, label="±2 s.d., binomial" if k == 0 else None)
        jitter = np.linspace(-0.22, 0.22, values.size)  # spread the dots so none hide another
        ax.scatter(k + jitter, values, s=14, color=COLORS[role], zorder=3,
                   marker=MARKERS["measured"], label="one draw" if k == 0 else None)
    ax.axhline(0.0, color=COLORS["reference"], linestyle=LINESTYLES["theory"], linewidth=1.2,
               label="target")
    ax.set_xticks(range(len(names)), labels=names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(ylabel)
    grid_and_title(ax, title)
    return ax
