"""The report of a stack matrix (``repliscope stacks``; ``repliscope report MATRIX_ID``): the per-stack table
against the first stack, every pair, and a chart of max |Δ raw output| per pair (log scale; 0 drawn as a marker)."""

from __future__ import annotations

from pathlib import Path

from repliscope.errors import RepliscopeError
from repliscope.records.stack_matrix import StackMatrix, summary_rows
from repliscope.report.figures import _figure, _png, png_data_uri

COLUMNS = [
    ("stack", "stack"),
    ("versions", "versions"),
    ("top1", "top-1 / AP"),
    ("delta", "Δ vs first"),
    ("agreement", "agreement"),
    ("flips", "flips →/←"),
    ("max_diff", "max |Δ output|"),
    ("mean_diff", "mean |Δ output|"),
    ("hash_equal", "hash equal"),
    ("seconds", "seconds"),
    ("throughput", "samples/s"),
    ("agent", "agent"),
    ("run_id", "run"),
]


def pair_label(m: StackMatrix, a: str, b: str) -> str:
    return f"{a[:12]} vs {b[:12]}"


def diff_chart(m: StackMatrix) -> bytes | None:
    """Horizontal bars of max |Δ raw output| per pair (log x); pairs with identical outputs get a 0 marker;
    None when no pair compared raw outputs."""
    pairs = [p for p in m.pairs if p.max_abs_output_diff is not None]
    if not pairs:
        return None
    fig = _figure(7.0, 0.45 * len(pairs) + 1.2)
    ax = fig.add_subplot()
    labels = [pair_label(m, p.a, p.b) for p in pairs]
    values = [p.max_abs_output_diff or 0.0 for p in pairs]
    positive = [v for v in values if v > 0]
    floor = min(positive) / 10 if positive else 1e-9
    ax.barh(labels, [max(v, floor) if v > 0 else 0 for v in values], color="#2c6fbb")
    for y, v in enumerate(values):
        ax.annotate(
            "0 (identical)" if v == 0 else f"{v:.3g}",
            (max(v, floor), y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    if positive:
        ax.set_xscale("log")
        ax.set_xlim(floor, max(positive) * 30)
    ax.invert_yaxis()
    ax.set_xlabel("max |Δ raw output| over every sample (log scale)")
    return _png(fig)


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
{% include "report.css" %}
</style></head><body>
<h1>{{ title }}</h1>
<p class="meta">stack matrix {{ m.matrix_id }} · {{ created }} · runtime {{ m.runtime }} · dataset
{{ m.dataset.identity[:16] }} ({{ m.dataset.n }} samples) · manifest sha256 {{ m.manifest.sha256[:12] }}</p>
<h2 id="stacks">Software stacks</h2>
<p class="note">The same manifest on the same samples in each stack; Δ, agreement (same top-1), flips (correct on the
first stack and wrong here → / the reverse ←), output differences and hash equality are against the first stack.</p>
<div style="overflow-x:auto"><table>
<tr>{% for key, head in columns %}<th>{{ head }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for key, head in columns %}<td class="{{ 'num' if key in numeric else '' }}">{{
 row[key] }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
<h2 id="pairs">Every pair</h2>
<div style="overflow-x:auto"><table>
<tr><th>a</th><th>b</th><th>compared</th><th>agreement</th><th>flips a→b</th><th>flips b→a</th>
<th>max |Δ output|</th><th>mean |Δ output|</th><th>hash equal</th></tr>
{% for p in m.pairs %}<tr><td>{{ p.a }}</td><td>{{ p.b }}</td><td class="num">{{ p.compared }}</td>
<td class="num">{{ '–' if p.agreement is none else '%.2f %%' % (100 * p.agreement) }}</td>
<td>{{ p.flips_ab | join(', ') or '–' }}</td><td>{{ p.flips_ba | join(', ') or '–' }}</td>
<td class="num">{{ '–' if p.max_abs_output_diff is none else '%.3g' % p.max_abs_output_diff }}</td>
<td class="num">{{ '–' if p.mean_abs_output_diff is none else '%.3g' % p.mean_abs_output_diff }}</td>
<td>{{ 'yes' if p.result_hash_equal else 'no' }}</td></tr>
{% endfor %}</table></div>
{% if chart %}<h2 id="outputs">Raw output differences</h2>
<figure><img src="{{ chart }}" alt="max |Δ raw output| per pair of stacks" style="max-width:100%">
<figcaption class="caption">Largest absolute difference of any raw model output element over every sample, per pair
of stacks (log scale; identical outputs are marked 0).</figcaption></figure>{% endif %}
<h2 id="specs">Stacks</h2>
<table class="kv">{% for s in m.stacks %}<tr><th>{{ s.key }}</th><td>{{ s.spec }}{% if s.error %}<br>
<strong>could not run the job:</strong> {{ s.error }}{% endif %}</td></tr>{% endfor %}</table>
</body></html>
"""


def render_stack_matrix_html(m: StackMatrix) -> str:
    """A self-contained HTML page (styles and chart embedded)."""
    from repliscope.report.templating import html_environment

    chart = diff_chart(m)
    return (
        html_environment()
        .from_string(_HTML)
        .render(
            m=m,
            title=f"{m.manifest.name} {m.manifest.version} across {len(m.stacks)} software stacks",
            created=f"{m.created_at:%Y-%m-%d %H:%M:%S %Z}".strip(),
            columns=COLUMNS,
            rows=summary_rows(m),
            numeric={"top1", "delta", "agreement", "flips", "max_diff", "mean_diff", "seconds", "throughput"},
            chart=png_data_uri(chart) if chart else None,
        )
    )


def render_stack_matrix_markdown(m: StackMatrix) -> str:
    """The same content as Markdown (the chart embedded as a data URI)."""
    from repliscope.report.templating import md_cell

    lines = [
        f"# {m.manifest.name} {m.manifest.version} across {len(m.stacks)} software stacks",
        "",
        f"stack matrix `{m.matrix_id}` · runtime {m.runtime} · {m.dataset.n} samples",
        "",
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(md_cell(row[k]) for k, _ in COLUMNS) + " |" for row in summary_rows(m)]
    lines += [f"\nstack {s.key} ({s.spec}) could not run the job: {md_cell(s.error)}" for s in m.stacks if s.error]
    chart = diff_chart(m)
    if chart:
        lines += ["", f"![max |Δ raw output| per pair]({png_data_uri(chart)})"]
    return "\n".join(lines) + "\n"


def write_stack_matrix_report(m: StackMatrix, path: Path, fmt: str = "html") -> Path:
    """Write the report as ``html`` or ``md`` to ``path`` (parents created)."""
    if fmt not in ("html", "md"):
        raise RepliscopeError(f"unknown report format '{fmt}' (allowed: html, md)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_stack_matrix_html(m) if fmt == "html" else render_stack_matrix_markdown(m), encoding="utf-8")
    return path
