"""MLModelScope ``output.type: boundingbox`` -> a repliscope ``object_detection`` postprocess.

What the agents ran (read 2026-11-23):

- rai-project/tensorflow @ 08454e7 (and c3sr/tensorflow @ 7f83589, same code) ``predictor/
  image_object_detection_predictor.go``: ``session.Run`` fetches ``boxes_layer``, ``probabilities_layer`` and
  ``classes_layer`` (``graph.Operation(name).Output(0)``, i.e. tensor ``name:0``) and nothing else: **no
  ``num_detections``**, so every one of the K rows of a TF Object Detection API export becomes a feature, the
  padding rows (score 0) included (``mlmodelscope.detection_all_rows``). When ``probabilities_layer`` or
  ``classes_layer`` is empty (``mergedOutputs``) ``ReadPredictedFeatures`` returns NO features: refused.
  rai-project/mxnet @ 1c2b684 and rai-project/caffe @ 4043f67 read the three outputs by index
  (``GetOutputLayerIndex``) and hand them to the same function.
- rai-project/dlframework @ 4aaa12c ``framework/predictor/image_predictor.go``
  ``createBoundingBoxFeaturesBatch{Flattened,Unflattened}``: ``Ymin = box[0], Xmin = box[1], Ymax = box[2],
  Xmax = box[3]`` as given (normalised, never scaled by the image size), ``Index = int32(class)`` and ``Label =
  labels[int32(class)]`` (no offset: with TF OD API ids 1..90 the label file must start with a placeholder line;
  a negative probability gives the label ``none``), then sorted by probability. No score threshold, no NMS.
  The label file's content cannot be read offline: ``coco_labels_paper.txt`` (MD5 ``a830abf7...``) and
  ``coco_labels_paper_background.txt`` (``17249a41...``) are taken as naming TF OD API ids
  (``mlmodelscope.detection_label_names``); other detection label files are refused. c3sr/tensorflow commit
  889f2ca (2021-02-01, "check all object detection models") moved 20 TF OD API manifests from the first to the
  second: the first has no background line, so rai-project's MLModelScope named class c after id c + 1 (the
  index it recorded, which the translation keeps, is right).
  Models whose agent is not TensorFlow, or whose box columns were reordered, get
  ``mlmodelscope.detection_box_order`` (MLModelScope's yxyx-normalised reading is kept, so check the model).
  c3sr/dlframework @ 11c2c11 (same file, ``createBoundingBoxFeaturesBatchFlattened``) adds output parameters:
  ``background_index`` (rows of that class dropped), ``ymin_index`` / ``xmin_index`` / ``ymax_index`` /
  ``xmax_index`` (box column order, default 0 1 2 3) and ``scale_width`` / ``scale_height`` (boxes divided by
  them, default 1).
- c3sr/pytorch @ 69832be and rai-project/pytorch ``predictor/image_object_detection_predictor.go``: output 0 is a
  per-class score matrix, each row's class is the ARGMAX over all classes (background included), no NMS:
  repliscope has no argmax-over-classes detection op, so PyTorch detection manifests are refused.

The translation: ``detections_from_outputs`` (the three outputs, ``count: null``, the box order read from the
index parameters, normalised), then boxes to pixels and the source image: with a fixed ``dimensions`` input
``box_format`` (``image_size`` = [H, W]) + ``to_source``; with an image-dependent input size (no
``dimensions``, or ``max_dimension`` / ``min_dimension``), ``box_format`` straight from coordinates normalised to
the source image: MLModelScope never crops or pads, every resize scales each axis, so coordinates normalised to
the model input are the same as normalised to the source image. Then ``class_map`` (``background`` from
``background_index``, offset 0). Class ids stay what MLModelScope recorded as the index; for TF OD API graphs
those are COCO category ids, so ``coco_labels_paper.txt`` is translated as ``builtin:coco-91``.
"""

from __future__ import annotations

from typing import Any

from repliscope.importers.mlmodelscope_rules import DETECTION_LABEL_FILES, Ctx, number

_BOX_KINDS: dict[tuple[int, ...], str] = {(0, 1, 2, 3): "yxyx", (1, 0, 3, 2): "xyxy"}
"""(ymin, xmin, ymax, xmax) column indices -> the box_format kind they read."""
_READERS = {"tensorflow": "named", "mxnet": "index", "caffe": "index"}
"""Agents whose detection predictor hands three outputs to createBoundingBoxFeatures (by tensor name / index)."""


def tensor_name(name: str) -> str:
    """The TF agent feeds and fetches ``graph.Operation(name).Output(0)``: the tensor ``name:0``."""
    return name if ":" in name else f"{name}:0"


def with_tensor_names(
    outputs: list[dict[str, Any]], post: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Outputs and the postprocess's output references renamed ``name`` -> ``name:0`` (a runnable TF graph)."""
    outs = [{**o, "name": tensor_name(o["name"])} for o in outputs]
    refs = {"detections_from_outputs": ("boxes", "scores", "classes", "count"), "mask_from_outputs": ("output",)}
    ops = [
        {**op, **{k: tensor_name(op[k]) for k in refs.get(op["op"], ()) if isinstance(op.get(k), str)}} for op in post
    ]
    return outs, ops


def _c3sr_int(params: dict[str, Any], key: str) -> int | None:
    """c3sr GetTypeParameter + strconv.Atoi: a whole number, or None (absent / not an int: the default)."""
    raw = params.get(key)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        return None


def detection_output(
    ctx: Ctx, data: dict[str, Any], framework: str, fixed_hw: tuple[int, int] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``outputs`` and ``postprocess`` of a boundingbox manifest (see the module docstring)."""
    params = (data.get("output") or {}).get("parameters") or {}
    f = "output.parameters"
    reader = _READERS.get(framework.lower())
    if reader is None:
        why = (
            "its detection predictor takes the per-row ARGMAX over all classes of output 0 (background "
            "included) as the class and keeps every row without NMS (c3sr/pytorch predictor/"
            "image_object_detection_predictor.go ReadPredictedFeatures); repliscope has no argmax-over-classes "
            "detection op"
            if framework.lower() == "pytorch"
            else "its detection predictor was not read, so how it read the outputs is unknown"
        )
        raise ctx.fail(
            "framework.name",
            f"{framework!r} boundingbox manifests are not translated: {why} (allowed: TensorFlow, MXNet, Caffe)",
            "detection_argmax" if framework.lower() == "pytorch" else "detection_agent_unread",
        )
    names = {k: str(params.get(k) or "").strip() for k in ("boxes_layer", "probabilities_layer", "classes_layer")}
    if not names["boxes_layer"]:
        raise ctx.fail(
            f"{f}.boxes_layer", "empty: the agent refuses to load the model ('boxes_layer in the manifest is empty')"
        )
    for key in ("probabilities_layer", "classes_layer"):
        if not names[key]:
            raise ctx.fail(
                f"{f}.{key}",
                "empty: the agent then treats the boxes as 'merged outputs' and "
                "ReadPredictedFeatures returns NO detections (rai-project/tensorflow predictor/"
                "image_object_detection_predictor.go): nothing to reproduce (allowed: an output name)",
                "merged_outputs",
            )
    given = [_c3sr_int(params, k) for k in ("ymin_index", "xmin_index", "ymax_index", "xmax_index")]
    order = tuple(d if g is None else g for d, g in enumerate(given))
    kind = _BOX_KINDS.get(order)
    if kind is None:
        raise ctx.fail(
            f"{f}.ymin_index",
            f"box columns (ymin, xmin, ymax, xmax) = {order}: no repliscope box "
            "kind reads that order (allowed: 0 1 2 3 = yxyx, 1 0 3 2 = xyxy)",
        )
    normalized = _scale(ctx, params, f, fixed_hw)
    if reader == "index" or order != (0, 1, 2, 3):
        ctx.warn(
            "detection_box_order",
            f"{f}.boxes_layer",
            f"MLModelScope read output {names['boxes_layer']!r} "
            f"as {kind} boxes {'normalised to the image' if normalized else 'in input pixels'} "
            "(createBoundingBoxFeaturesBatch, no other convention exists there); translated so: check that "
            "the model really emits that (TF OD API graphs do; e.g. GluonCV detectors emit xyxy pixels)",
        )
    ctx.warn(
        "detection_all_rows",
        f"{f}.boxes_layer",
        "MLModelScope fetched no detection count (num_detections): "
        "every row of the outputs became a detection, padding rows with score 0 included, with no score "
        "threshold and no NMS of its own; translated so (count: null); COCO AP ranks those rows last",
    )
    outputs = [
        {"name": names["boxes_layer"], "shape": [-1, -1, 4], "dtype": "float32", "layout": "NKC", "kind": "boxes"},
        {"name": names["probabilities_layer"], "shape": [-1, -1], "dtype": "float32", "layout": "NK", "kind": "scores"},
        {"name": names["classes_layer"], "shape": [-1, -1], "dtype": "float32", "layout": "NK", "kind": "classes"},
    ]
    space = "input" if fixed_hw is not None or not normalized else "source"
    read = {"kind": kind, "normalized": normalized, "one_based": False, "space": space}
    pixels = {"kind": "xyxy", "normalized": False, "one_based": False, "space": space}
    post: list[dict[str, Any]] = [
        {
            "op": "detections_from_outputs",
            "boxes": names["boxes_layer"],
            "scores": names["probabilities_layer"],
            "classes": names["classes_layer"],
            "count": None,
            "format": read,
        }
    ]
    if read != pixels:
        post.append(
            {
                "op": "box_format",
                "from": dict(read),
                "to": pixels,
                "image_size": list(fixed_hw) if space == "input" and normalized and fixed_hw else None,
            }
        )
    if space == "input":
        post.append({"op": "to_source", "undo": "geometry", "clip": False})
    post.append({"op": "class_map", "background": _c3sr_int(params, "background_index"), "offset": 0, "table": "none"})
    return outputs, post


def _scale(ctx: Ctx, params: dict[str, Any], f: str, fixed_hw: tuple[int, int] | None) -> bool:
    """True: boxes normalised (c3sr scale_width / scale_height absent or 1); False: the scales are the input's
    width and height, so the boxes were input pixels; any other scale is refused."""
    sw, sh = _c3sr_int(params, "scale_width"), _c3sr_int(params, "scale_height")
    if sw in (None, 1) and sh in (None, 1):
        return True
    if fixed_hw is not None and (sh, sw) == fixed_hw:
        return False
    raise ctx.fail(
        f"{f}.scale_width",
        f"boxes divided by scale_width {sw} / scale_height {sh}: they are "
        "normalised only if those are the input's width and height "
        f"({'input size ' + str(list(fixed_hw)) if fixed_hw else 'the input size depends on the image'})"
        "; allowed: absent, 1, or the dimensions' W and H",
    )


def detection_labels(ctx: Ctx, data: dict[str, Any]) -> dict[str, Any]:
    """``labels`` of a boundingbox manifest: the features file identified by its MD5 (no download)."""
    params = (data.get("output") or {}).get("parameters") or {}
    url = str(params.get("features_url") or "").strip()
    md5 = str(params.get("features_checksum") or "").strip().lower()
    f = "output.parameters.features_url"
    known = DETECTION_LABEL_FILES.get(md5)
    if known is None:
        raise ctx.fail(
            f,
            f"{url or '(missing)'} (MD5 {md5 or 'empty'}) is not a detection label file the importer "
            "knows; the class ids cannot be named without downloading it (allowed: the files with MD5 "
            f"{', '.join(sorted(DETECTION_LABEL_FILES))})",
            "unknown_label_file",
        )
    source, count, note = known
    if source == "builtin:coco-91":
        ctx.warn(
            "detection_label_names",
            f,
            f"MLModelScope recorded each detection's class as Index = "
            f"int32(class) and named it labels[int32(class)] from {url}: the translation keeps the index as "
            f"the class id and names it with {source} (index = COCO category id, 0 = background), which is "
            f"what TF Object Detection API graphs emit; {note}",
        )
    return {"source": source, "num_classes": count}


def detection_claims(data: dict[str, Any], attr: Any, file_name: str) -> list[dict[str, Any]]:
    """``attributes.mAP`` (e.g. 0.20 for MLPerf SSD-ResNet34) -> an AP claim on COCO val2017 (a fraction)."""
    val = attr(data, "map")
    trained = str(attr(data, "training_dataset") or "").strip().lower()
    if val is None or trained != "coco":
        return []
    value = number(val, "attributes.mAP")
    if value > 1:
        value = value / 100.0
    return [
        {
            "metric": "AP",
            "value": value,
            "dataset": {"name": "coco", "split": "val2017"},
            "source": f"MLModelScope manifest {file_name} (attributes.mAP)",
        }
    ]
