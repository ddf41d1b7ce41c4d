"""MLModelScope ``output.type: semanticsegment`` -> a repliscope ``semantic_segmentation`` postprocess.

What the agents ran (read 2026-11-27; the pre-processing is the shared read + preprocess steps, translated as for
classification):

- rai-project/tensorflow @ 08454e7 and c3sr/tensorflow @ 7f83589 ``predictor/image_semanitc_segmentation_predictor.go``
  (sic): ``session.Run`` feeds ``input_layer`` and fetches ``graph.Operation(masks_layer).Output(0)``, which must be
  an ``[][][]int64`` (``ReadPredictedFeatures``: "output is not of type [][][]int64"): a class-id map per image, as
  TensorFlow DeepLab's exported ``SemanticPredictions`` is (its graph resizes the labels back to ``ImageTensor``'s
  height and width itself, nearest, corner-aligned). Translated as output kind ``mask_labels`` (layout NHW) read by
  ``mask_from_outputs`` with ``labels: true``.
- c3sr/pytorch @ 69832be and rai-project/pytorch @ 8f82a34 ``predictor/image_semantic_segmentation_predictor.go``
  (and c3sr/onnxruntime before 62e2528, the same loop): ``masks_layer`` is never read; output 0 is taken as
  float32 ``[N, C, H, W]`` and each pixel's class is the first index of the maximum over C (``if v > cur``: ties
  keep the lower index). Translated as output 0, kind ``mask_logits`` NCHW, then ``mask_argmax`` (ties: lowest
  index, the same rule).
- rai-project/caffe @ 4043f67 and c3sr/caffe @ 94203d1 ``predictor/image_semantic_segmentation_predictor.go``:
  go-caffe's ``ReadOutputData`` returns a flat ``[]float32``, for which dlframework's
  ``CreateSemanticSegmentFeatures`` (rai-project/dlframework @ 4aaa12c and c3sr/dlframework @ 11c2c11
  ``framework/predictor/image_predictor.go``) prints "return type []float32 currently is not supported" and
  returns NO features: the Caffe agent produced no mask (refused, ``segmentation_no_output``).
- The MXNet, Caffe2, CNTK and TensorRT agents have no semantic segmentation predictor (refused).

``CreateSemanticSegmentFeaturesFrom2D`` records the map as it came out of the model (``Height`` / ``Width`` = the
map's own size, ``IntMask`` flattened, probability 1): MLModelScope never mapped it back onto the image. Scoring
against ground truth needs it in the image's pixels, so the translation ends with ``mask_resize`` (nearest,
half-pixel centres: the exact inverse of the per-axis resize MLModelScope applied to the input, through each
sample's geometry, or ``mapping: stretch`` when the input size depends on the image, which is the same mapping
since MLModelScope never crops or pads), with ``mlmodelscope.segmentation_resize``.
"""

from __future__ import annotations

from typing import Any

from repliscope.importers.mlmodelscope_rules import Ctx, given_labels, other_labels_file

_READERS = {"tensorflow": "labels", "pytorch": "argmax", "onnxruntime": "argmax"}
"""Agents with a semantic segmentation predictor: ``labels`` fetches an int64 class map by name, ``argmax``
takes output 0 as NCHW scores and argmaxes it."""

SEGMENTATION_LABEL_FILES: dict[str, tuple[str, int]] = {
    # .../deeplabv3_mnv2_pascal_train_aug_2018_01_29/pascal-voc-classes.txt and .../pascal_voc/pascal_voc_labels.txt:
    # 'background' then the 20 VOC classes (checked by content, tests/importers/test_mlmodelscope_corpus.py)
    "9ce439bcfb44c304e49a0fe1ae398f69": ("builtin:voc-21", 21),
    # .../coco/coco_labels_2014_2017_background.txt: 'background' then the 80 COCO classes
    "e7103a997c945e0f87c49a03c9c56a1b": ("builtin:coco-80-background", 81),
}
"""Label files a segmentation model can use, by MD5: a class-id map names class i by line i, and repliscope's
task needs the class of uncovered pixels to be called ``background``, so only lists with that line qualify."""


def segmentation_agent(ctx: Ctx, framework: str) -> str:
    """How the agent read the map (``labels`` or ``argmax``); a refusal for agents that produced no mask."""
    agent = framework.lower()
    reader = _READERS.get(agent)
    if agent == "caffe":
        raise ctx.fail(
            "framework.name",
            "the Caffe agent reads the masks_layer output as a flat []float32 (go-caffe "
            "ReadOutputData) and dlframework's CreateSemanticSegmentFeatures returns NO features for that type "
            "('return type []float32 currently is not supported for semantic semenation'): MLModelScope "
            "produced no mask for this model, so there is nothing to reproduce (allowed: TensorFlow, PyTorch, "
            "ONNX Runtime); to evaluate the model anyway, write the manifest by hand (an FCN's score output: "
            "kind mask_logits, layout NCHW, then mask_argmax and mask_resize)",
            "segmentation_no_output",
        )
    if reader is None:
        raise ctx.fail(
            "framework.name",
            f"{framework!r} has no semantic segmentation predictor in MLModelScope (only the TensorFlow, "
            "PyTorch and ONNX Runtime agents register one), so the model never ran there (allowed: "
            "TensorFlow, PyTorch, ONNX Runtime)",
            "semantic_segmentation",
        )
    return reader


def segmentation_output(
    ctx: Ctx, data: dict[str, Any], reader: str, framework: str, fixed_hw: tuple[int, int] | None, num_classes: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``outputs`` and ``postprocess`` of a semanticsegment manifest read the ``reader`` way (see the module
    docstring); ``fixed_hw``: the input's (H, W), None when it depends on the image."""
    params = (data.get("output") or {}).get("parameters") or {}
    f = "output.parameters.masks_layer"
    if reader == "labels":
        name = str(params.get("masks_layer") or "").strip()
        if not name:
            raise ctx.fail(
                f, "empty: the TensorFlow agent fetches the class map by this operation name (allowed: a name)"
            )
        elem = str(params.get("element_type") or "int64").strip().lower()
        if elem != "int64":
            raise ctx.fail(
                "output.parameters.element_type",
                f"{elem!r}: the TensorFlow agent accepts only an [][][]int64 class map "
                "(ReadPredictedFeatures: 'output is not of type [][][]int64') (allowed: int64)",
            )
        outputs = [{"name": name, "shape": [-1, -1, -1], "dtype": "int64", "layout": "NHW", "kind": "mask_labels"}]
        post: list[dict[str, Any]] = [
            {"op": "mask_from_outputs", "output": name, "layout": "NHW", "activated": False, "labels": True}
        ]
    else:
        name = "0"
        given = params.get("masks_layer")
        ctx.warn(
            "segmentation_output",
            f,
            f"the {framework} agent never reads masks_layer"
            + (f" ({given!r})" if given not in (None, "") else "")
            + ": it takes output 0 as float32 [N, C, H, W] scores and labels each pixel with the first index of "
            "the maximum over C; translated as output '0' (mask_logits, NCHW) and mask_argmax (ties: lowest index)",
        )
        outputs = [
            {
                "name": name,
                "shape": [-1, num_classes, -1, -1],
                "dtype": "float32",
                "layout": "NCHW",
                "kind": "mask_logits",
            }
        ]
        post = [
            {"op": "mask_from_outputs", "output": name, "layout": "NCHW", "activated": False},
            {"op": "mask_argmax"},
        ]
    resize: dict[str, Any] = {"op": "mask_resize", "method": "nearest", "sampling": "half_pixel", "library": "numpy"}
    if fixed_hw is not None:
        resize |= {"mapping": "geometry", "input_size": list(fixed_hw)}
    else:
        resize |= {"mapping": "stretch"}
    ctx.warn(
        "segmentation_resize",
        f,
        "MLModelScope returned the class map at the size the model emitted it (its SemanticSegment feature "
        "records that Height x Width) and never mapped it onto the image; to score it against ground truth the "
        "translation adds mask_resize (nearest, half-pixel centres: the inverse of the per-axis resize applied "
        "to the input, as MLModelScope never crops or pads), which MLModelScope did not run",
    )
    return outputs, [*post, resize]


def segmentation_labels(ctx: Ctx, data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``labels`` of a semanticsegment manifest: the features file identified by its MD5 (no download)."""
    params = (data.get("output") or {}).get("parameters") or {}
    url = str(params.get("features_url") or "").strip()
    md5 = str(params.get("features_checksum") or "").strip().lower()
    f = "output.parameters.features_url"
    known = SEGMENTATION_LABEL_FILES.get(md5)
    if known is not None:
        source, count = known
        return {"source": source, "num_classes": count}, count
    given = given_labels(ctx, url, md5)
    if given is not None:
        names = [ln.strip() for ln in given["names"]]
        if "background" not in names:
            raise ctx.fail(
                f,
                f"--labels {ctx.labels_file} has no 'background' line: repliscope's segmentation task scores "
                "the pixels no dataset category covers as the class named background (allowed: a list with "
                "a 'background' line)",
                "unknown_label_file",
            )
        return {k: v for k, v in given.items() if k != "names"}, int(given["num_classes"])
    raise ctx.fail(
        f,
        f"{url or '(missing)'} (MD5 {md5 or 'empty'}) is not a segmentation label file the importer knows"
        f"{other_labels_file(ctx)}; the class ids of the map cannot be named without it: download it, check "
        f"`md5sum FILE` = {md5 or '(none given: check the file by other means)'} and import again with "
        "--labels FILE (allowed: the "
        f"files with MD5 {', '.join(sorted(SEGMENTATION_LABEL_FILES))}, whose first class is 'background', or "
        "--labels FILE with a 'background' line)",
        "unknown_label_file",
    )
