"""The report of a stored diff (``repliscope report DIFF_ID``): a pipeline diff's verdict, diagnosis (closest
variants, hints), stages, timing, heatmaps and model effect; a task diff's agreement, McNemar and flipped samples;
a layer diff's first divergence per mode and its per-layer error chart; a loss diff's values and gradient errors.
HTML (self-contained) or Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repliscope.errors import RepliscopeError
from repliscope.report.figures import png_data_uri
from repliscope.store.diffs import StoredDiff


def _f(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _p(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.2f} %"


def _effect(d: StoredDiff) -> dict[str, Any] | None:
    if d.kind == "pipeline_diff":
        effect: dict[str, Any] | None = d.result.get("model_effect")
        return effect
    return d.result if d.kind == "task_diff" else None


def layer_chart(result: dict[str, Any]) -> str | None:
    """A layer diff's per-layer error chart (:func:`repliscope.diff.layers.plot.plot_layer_errors`) as a ``data:`` URI;
    None when the result does not validate as a layer diff."""
    import tempfile
    from pathlib import Path

    from pydantic import ValidationError

    from repliscope.diff.layers.layer_result import LayerDiffResult
    from repliscope.diff.layers.plot import plot_layer_errors

    try:
        parsed = LayerDiffResult.model_validate(result)
    except ValidationError:
        return None
    with tempfile.TemporaryDirectory(prefix="repliscope-chart-") as tmp:
        path = plot_layer_errors(parsed, Path(tmp) / "layers.png")
        data = path.read_bytes()
    return png_data_uri(data)


def _figure(d: StoredDiff, png: bytes | None) -> str | None:
    if png is not None:
        return png_data_uri(png)
    if d.kind == "layer_diff":
        return layer_chart(d.result)
    return None


def render_diff_html(d: StoredDiff, png: bytes | None = None) -> str:
    from repliscope.report.templating import html_environment

    return (
        html_environment()
        .get_template("html/diff-report.html.j2")
        .render(
            d=d,
            r=d.result,
            title=f"{d.kind.replace('_', ' ')} {d.manifest_name}".strip(),
            f=_f,
            p=_p,
            effect=_effect(d),
            figure=_figure(d, png),
        )
    )


def render_diff_markdown(d: StoredDiff, png: bytes | None = None) -> str:
    r = d.result
    lines = [
        f"# {d.kind.replace('_', ' ')} {d.manifest_name}".rstrip(),
        "",
        f"diff `{d.diff_id}` · {d.created_at:%Y-%m-%d %H:%M:%S} UTC",
        "",
        f"- A: {d.a}",
        f"- B: {d.b}",
        f"- verdict: **{d.verdict}**: {d.summary}",
    ]
    if d.kind == "pipeline_diff":
        lines += [
            "",
            r.get("output_message", ""),
            "",
            f"max |error| {_f(r.get('max_abs_error'))}, values differing "
            f"{_p(r.get('fraction_differing'))}, tolerance {_f(r.get('tolerance'))}",
            "",
        ]
        lines += [f"- hint: {h}" for h in r["diagnosis"].get("hints", [])]
        if r["diagnosis"].get("candidates"):
            lines += ["", "| variant | residual max abs error |", "|---|---|"]
            lines += [f"| {c['variant']} | {_f(c['max_abs_error'])} |" for c in r["diagnosis"]["candidates"]]
        if r.get("first_divergent_stage"):
            lines += ["", f"First divergent stage: **{r['first_divergent_stage']}**"]
        t = r.get("timing") or {}
        if t.get("samples_timed"):
            lines += [
                "",
                f"Timing: manifest {t['reference_ms_per_image']:.2f} ms/image, candidate "
                f"{t['candidate_ms_per_image']:.2f} ms/image, ratio {t['ratio']:.2f}",
            ]
    if d.kind == "loss_diff":
        lines += ["", f"Loss: {r['candidate']} vs {r['reference']} ({r['origin']}), {r['source']}", ""]
        lines += ["| value | original | candidate | abs error | tolerance |", "|---|---|---|---|---|"]
        rows = [r["total"], *r["components"]]
        lines += [f"| {c['name']} | {_f(c['original'])} | {_f(c['candidate'])} | {_f(c['abs_error'])} | "
                  f"{_f(c['tolerance'])} |" for c in rows]  # fmt: skip
        lines += ["", "| gradient of | max abs error | ulp | tolerance |", "|---|---|---|---|"]
        lines += [
            f"| {g['output']} | {_f(g['max_abs'])} | {_f(g['ulp'])} | {_f(g['tolerance'])} |" for g in r["gradients"]
        ]
    if d.kind == "augmentation_diff":
        lines += ["", f"Augmentation: {r['candidate']} vs {r['pipeline']['pipeline']} ({r['pipeline']['origin']}), "
                  f"{r['samples']} images x {len(r['seeds'])} seeds, {r['draws']} draws", ""]  # fmt: skip
        if r.get("ops"):
            lines += ["| op | compared | differing | max abs error | tolerance | hint |", "|---|---|---|---|---|---|"]
            lines += [f"| {o['name']} | {o['compared']} | {o['differing']} | {_f(o['max_abs_err'])} | "
                      f"{_f(o['tolerance'])} | {o.get('hint') or ''} |" for o in r["ops"]]  # fmt: skip
        if r.get("distribution"):
            head = "| op | statistic | original mean | candidate mean | KS | p (adjusted) |"
            lines += [head, "|---|---|---|---|---|---|"]
            lines += [f"| {t['op']} | {t['statistic']} | {_f(t['original_mean'])} | {_f(t['candidate_mean'])} | "
                      f"{_f(t['ks'])} | {_f(t['p_adjusted'])} |" for t in r["distribution"]]  # fmt: skip
        lines += ["", f"First divergent op: **{r['first_divergent']}**" if r.get("first_divergent") else
                  "Every op matches the original"]  # fmt: skip
    if d.kind == "gradient_diff":
        lines += ["", f"Gradients: {r['candidate']} vs {r['reference']}, {r['samples']} images, batch {r['batch']}", ""]
        lines += ["| parameter | relative L2 | tolerance | cosine | within |", "|---|---|---|---|---|"]
        lines += [f"| {q['layer']}.{q['param']} | {_f(q['rel_l2'])} | {_f(q['tolerance'])} | {_f(q['cosine'])} | "
                  f"{'yes' if q['passed'] else '**no**'} |" for q in r.get("params", [])]  # fmt: skip
        lines += ["", f"First divergent: **{r['first_divergent']}**" if r.get("first_divergent") else
                  "Every parameter gradient within tolerance"]  # fmt: skip
    if d.kind == "training_step_diff":
        lines += ["", f"Training steps: {r['candidate']} vs {r['reference']}, {r['steps']} steps, batch {r['batch']}"]
        head = "| step | learning rate | Darknet loss | port loss | relative | tolerance |"
        lines += ["", head, "|---|---|---|---|---|---|"]
        lines += [f"| {t['step']} | {_f(t['learning_rate'])}{' (changed)' if t.get('lr_changed') else ''} | "
                  f"{_f(t['darknet_loss'])} | {_f(t['port_loss'])} | {_f(t['loss_rel'])} | {_f(t['loss_tolerance'])} |"
                  for t in r.get("rows", [])]  # fmt: skip
        sep = r.get("first_separation")
        lines += ["", f"First separation: step {sep['step']}, **{sep['layer']}.{sep['param']}** (drift relative "
                  f"{_f(sep['rel'])} > {_f(sep['tolerance'])})" if sep else
                  "No weight separates beyond tolerance"]  # fmt: skip
    effect = _effect(d)
    if effect:
        lines += [
            "",
            f"Agreement {_p(effect.get('agreement'))} over {effect.get('compared')} samples, "
            f"{len(effect.get('flips') or [])} flipped",
        ]
    figure = _figure(d, png)
    if figure:
        lines += ["", f"![figure]({figure})"]
    return "\n".join(lines) + "\n"


def write_diff_report(d: StoredDiff, png: bytes | None, path: Path, fmt: str = "html") -> Path:
    """Write the report of a stored diff as ``html`` or ``md`` to ``path``."""
    if fmt not in ("html", "md"):
        raise RepliscopeError(f"unknown report format '{fmt}' (allowed: html, md)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_diff_html(d, png) if fmt == "html" else render_diff_markdown(d, png), encoding="utf-8")
    return path
