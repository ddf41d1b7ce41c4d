"""Per-layer error plot of a layer diff (matplotlib, Agg backend): the figure the HTML report embeds."""

from __future__ import annotations

import math
from pathlib import Path

from repliscope.diff.layers.layer_result import LayerDiffResult


def plot_layer_errors(result: LayerDiffResult, path_png: str | Path) -> Path:
    """Write a PNG and return its path.

    x: compared layer in execution order; y (log scale): ``max |candidate - reference| / tolerance`` of each
    layer, one curve per mode (golden: each layer fed the reference input; carried: the candidate's own
    forward), so the tolerance is the horizontal line y = 1 for every layer. Exact matches (error 0) are
    drawn as hollow markers on the bottom edge; reference ops the candidate has no counterpart for (a dropped
    residual add) as red crosses on the top edge. Each mode's first divergent unit is marked with a vertical
    line and its path (``_blocks.5._bn0``, ``layer1.0/add``).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = result.layers
    ratios = {m: [(i, (r.golden if m == "golden" else r.carried)) for i, r in enumerate(rows)] for m in result.modes}
    positive = [s.ratio for pts in ratios.values() for _, s in pts if s is not None and 0 < s.ratio < math.inf]
    floor = min([*positive, 1.0]) / 10
    top = max([*positive, 1.0]) * 5
    fig, ax = plt.subplots(figsize=(max(8.0, len(rows) * 0.12), 4.5), dpi=110)
    styles = {"golden": ("tab:blue", "o"), "carried": ("tab:orange", "s")}
    for mode, pts in ratios.items():
        colour, marker = styles[mode]
        shown = [(i, min(s.ratio, top)) for i, s in pts if s is not None and s.ratio > 0]
        zeros = [i for i, s in pts if s is not None and s.ratio == 0]
        if shown:
            ax.plot(
                [p[0] for p in shown],
                [p[1] for p in shown],
                color=colour,
                marker=marker,
                markersize=3,
                linewidth=1.0,
                label=f"{mode}",
            )
        if zeros:
            ax.scatter(
                zeros,
                [floor] * len(zeros),
                facecolors="none",
                edgecolors=colour,
                marker=marker,
                s=14,
                label=f"{mode}: exact (0)",
                clip_on=False,
                zorder=3,
            )
        first = result.first_divergent.get(mode)
        if first is not None:
            ax.axvline(first.index, color=colour, linestyle=":", linewidth=1.2)
            ax.annotate(
                f"first divergent ({mode}):\n{first.path}",
                xy=(first.index, min(first.ratio, top)),
                xytext=(6, -24),
                textcoords="offset points",
                fontsize=8,
                color=colour,
            )
    missing = [i for i, r in enumerate(rows) if r.missing]
    if missing:
        ax.scatter(
            missing,
            [top] * len(missing),
            color="tab:red",
            marker="X",
            s=40,
            clip_on=False,
            zorder=4,
            label="missing in the candidate",
        )
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1.0, label="tolerance")
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.set_xlabel("compared layer (execution order)")
    ax.set_ylabel("max |candidate - reference| / tolerance")
    name = result.candidate.get("candidate", "candidate")
    ax.set_title(
        f"layer-level diff: {result.reference.get('framework', 'reference')} vs {name}, "
        f"batch {result.input_shape[0] if result.input_shape else '?'} ({result.formula.split(';')[0]})",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    if len(rows) <= 40:
        ax.set_xticks(range(len(rows)), [r.path for r in rows], rotation=90, fontsize=6)
    fig.tight_layout()
    out = Path(path_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
