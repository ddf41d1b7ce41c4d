"""The training sections of the web diff page (``/diffs/{id}``) for a stored ``gradient_diff`` or
``training_step_diff``: :func:`training_context` turns the stored result into the plain rows the template
``diff_training.html`` shows (the per-parameter gradient table in backward order with the first divergent row
marked, the forward table with kink crossings; the per-step losses, the loss chart (the stored figure), the first
separation and the last step's drift per parameter, the optimiser configuration).

Hooked into :func:`repliscope.service.web.diff_pages.diff_page` by passing ``**training_context(stored.kind,
stored.result)`` to the page and including the template from ``diff.html`` for these two kinds."""

from __future__ import annotations

from typing import Any

TRAINING_KINDS = ("gradient_diff", "training_step_diff")


def _f(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _gradient(result: dict[str, Any]) -> dict[str, Any]:
    first = result.get("first_divergent")
    params = []
    for p in result.get("params") or []:
        key = f"{p.get('layer')}.{p.get('param')}"
        params.append(
            {
                "name": key,
                "shape": "×".join(str(s) for s in p.get("shape") or []),
                "rel_l2": _f(p.get("rel_l2")),
                "tolerance": _f(p.get("tolerance")),
                "sensitivity": _f(p.get("float32_sensitivity")),
                "kink": _f(p.get("kink_allowance")),
                "cosine": _f(p.get("cosine")),
                "norm_ratio": _f(p.get("norm_ratio")),
                "passed": bool(p.get("passed")),
                "first": key == first,
            }
        )
    forward = [
        {
            "layer": str(f.get("layer", "")),
            "rel": _f(f.get("rel")),
            "crossings": f.get("kink_crossings"),
            "rounding": f.get("rounding_kink_crossings"),
        }
        for f in result.get("forward") or []
    ]
    det = result.get("determinism") or {}
    return {
        "kind": "gradient_diff",
        "first_divergent": first,
        "summary": str(result.get("summary", "")),
        "conventions": [str(v) for v in (result.get("conventions") or {}).values()],
        "cost": _f(result.get("cost")),
        "batch": result.get("batch"),
        "images": [str(i) for i in result.get("images") or []],
        "k": _f(result.get("k")),
        "formula": str(result.get("tolerance_formula", "")),
        "port": {str(k): str(v) for k, v in (result.get("port") or {}).items()},
        "deterministic": bool(det.get("deterministic")),
        "determinism": str(det.get("note", "")),
        "params": params,
        "forward": forward,
    }


def _steps(result: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            "step": r.get("step"),
            "lr": _f(r.get("learning_rate")),
            "darknet": _f(r.get("darknet_loss")),
            "port": _f(r.get("port_loss")),
            "rel": _f(r.get("loss_rel")),
            "tolerance": _f(r.get("loss_tolerance")),
            "lr_changed": bool(r.get("lr_changed")),
            "passed": (_f(r.get("loss_rel")) or 0.0) <= (_f(r.get("loss_tolerance")) or 0.0),
        }
        for r in result.get("rows") or []
    ]
    drift = result.get("drift") or []
    last_step = max((d.get("step", 0) for d in drift), default=0)
    last = [
        {
            "name": f"{d.get('layer')}.{d.get('param')}",
            "darknet": _f(d.get("darknet_drift")),
            "port": _f(d.get("port_drift")),
            "rel": _f(d.get("rel")),
            "tolerance": _f(d.get("tolerance")),
            "passed": bool(d.get("passed")),
        }
        for d in drift
        if d.get("step") == last_step
    ]
    optimizer = result.get("optimizer") or {}
    config = optimizer.get("config") or {}
    return {
        "kind": "training_step_diff",
        "first_divergent": result.get("first_divergent"),
        "summary": str(result.get("summary", "")),
        "conventions": [str(v) for v in (result.get("conventions") or {}).values()],
        "steps": result.get("steps"),
        "batch": result.get("batch"),
        "images": [str(i) for i in result.get("images") or []],
        "optimizer": str(optimizer.get("class", "")),
        "optimizer_config": {str(k): str(v) for k, v in config.items()},
        "gradient_rule": str(optimizer.get("gradient", "")),
        "solver": {str(k): str(v) for k, v in (result.get("solver") or {}).items()},
        "rows": rows,
        "last_step": last_step,
        "drift": last,
    }


def training_context(kind: str, result: dict[str, Any]) -> dict[str, Any]:
    """``{"training": ...}`` for a gradient or training-step diff, ``{"training": None}`` for any other kind."""
    if kind == "gradient_diff":
        return {"training": _gradient(result)}
    if kind == "training_step_diff":
        return {"training": _steps(result)}
    return {"training": None}
