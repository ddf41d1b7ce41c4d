"""MLModelScope facts the importer relies on, kept apart from the translation: the keys its Go structs read,
its framework-version constraint syntax, its known label files, and the YAML reading that keeps scalars as
the Go agents see them. Every fact has its source reference in docs/mlmodelscope-semantics.md.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from repliscope.importers.base import ConfigImportError, ImportWarning

WARNING_CODES = {
    "python_hook": "an embedded Python hook (preprocess/postprocess/before_*/after_*) was NOT run or translated",
    "suspicious_units": "mean/scale look like they were written for another pixel range or meant as a multiplier",
    "bgr_mean_order": "a BGR manifest with a per-channel mean: which index MLModelScope applied to which channel",
    "empty_checksum": "a checksum field is empty: MLModelScope downloaded that file unverified",
    "md5_checksum": "an MD5 checksum cannot stand for a sha256: source.sha256 is a placeholder",
    "unknown_key": "a key no MLModelScope struct reads (typo or dead field); ignored, as MLModelScope ignored it",
    "container_image": "the container images are not used: repliscope runs in the local environment",
    "framework_not_runnable": "the model's framework/format is not one repliscope runs (torch state_dict, ONNX)",
    "framework_version": "the framework version constraint cannot be carried over exactly",
    "framework_runtime": "the agent's constraint is on its runtime package (onnxruntime), given as a --stack spec",
    "http_url": "an http:// URL was rewritten to https:// (repliscope downloads over https only)",
    "archive_source": "the model is inside an archive: repliscope reads one model file, not an archive member",
    "two_file_model": "graph and weights are two files (e.g. prototxt + caffemodel); repliscope takes one",
    "crop_ignored": "crop_method/crop_ratio are parsed but no MLModelScope pipeline applies a crop",
    "label_file_mismatch": "an ImageNet label file on a model whose training_dataset is something else",
    "label_offset": "the label file has a background class at index 0 (1001 / 1008 classes); its order is named",
    "missing_field": "a field is absent; the documented MLModelScope default (or a marked placeholder) is used",
    "resize_rounding": "max_dimension / min_dimension: the aspect-keeping resize rounds a side differently (1 px)",
    "keep_aspect_ratio_ignored": "keep_aspect_ratio without max_dimension / min_dimension: MLModelScope ignored it",
    "detection_all_rows": "detections: MLModelScope read every row of the box outputs (no count), padding included",
    "detection_label_names": "detections: class index = COCO id as MLModelScope recorded it; the label file is unread",
    "detection_box_order": "detections: a non-TF-OD-API model's boxes read as [ymin, xmin, ymax, xmax] normalised",
    "feature_output": "output.type feature: the agent's classifier probability vector, translated as classification",
    "agent_overrides": "the agent (Caffe2, CNTK) overrode the manifest's color_mode / layout in its own code",
    "agent_steps_unverified": "the agent pins an older dlframework/image whose steps were not compared line by line",
    "segmentation_output": "semanticsegment (PyTorch, ONNX Runtime): output 0 argmaxed per pixel, masks_layer unread",
    "labels_file": "the features file is the --labels FILE given (its MD5 checked): labels.source names it",
    "segmentation_resize": "semanticsegment: the map is resized onto the image (nearest), which MLModelScope never did",
}
"""Every warning name the importer emits (the code is ``mlmodelscope.<name>``), with its one-line meaning
(stable: tests pin them)."""

REFUSAL_REASONS = {
    "invalid": "the file breaks MLModelScope's manifest format (YAML, types, required fields, values)",
    "limits": "the file exceeds the reading limits (size, nesting, node count, number size)",
    "non_image_input": "an input other than one image (text, several inputs): no image pipeline to reproduce",
    "semantic_segmentation": "semanticsegment with an agent that has no segmentation predictor (MXNet, Caffe2, ...)",
    "segmentation_no_output": "semanticsegment on Caffe: the agent returned no mask ([]float32 unsupported)",
    "instance_segmentation": "output.type instancesegment (Mask R-CNN): no instance task; write a detection manifest",
    "image_output": "output.type image (super-resolution, enhancement): no image-to-image task or metric",
    "coordinates_output": "output.type coordinates (pose keypoints): no keypoint task or metric",
    "other_output": "another output.type (raw tensors, text): no repliscope task",
    "unknown_label_file": "a features file not identified by its MD5: give your copy with --labels FILE",
    "detection_argmax": "PyTorch boundingbox: per-row argmax over classes, no repliscope op",
    "detection_agent_unread": "boundingbox with an agent whose detection predictor was not read",
    "merged_outputs": "boundingbox with an empty probabilities/classes layer: the agent returned no detections",
    "image_dependent_size": "a classifier fed at the image's own size, or a resize no repliscope op reproduces",
    "model_file": "a local model file that is missing or fails its MD5",
}
"""Every refusal reason (``ConfigImportError.reason``), with its one-line meaning: the rows of the coverage table
``manifest import mlmodelscope DIR --out-dir OUT`` prints (stable: the corpus test pins the counts)."""

TOP_KEYS = {
    "name",
    "framework",
    "version",
    "container",
    "description",
    "references",
    "license",
    "inputs",
    "output",
    "model",
    "attributes",
    "hidden",
    "preprocess",
    "postprocess",
    "before_preprocess",
    "after_preprocess",
    "before_postprocess",
    "after_postprocess",
}
HOOK_KEYS = (
    "preprocess",
    "postprocess",
    "before_preprocess",
    "after_preprocess",
    "before_postprocess",
    "after_postprocess",
)
FRAMEWORK_KEYS = {"name", "version"}
TYPE_KEYS = {"type", "description", "parameters"}
MODEL_KEYS = {"base_url", "graph_path", "weights_path", "is_archive", "graph_checksum", "weights_checksum"}
INPUT_PARAMS = {
    "element_type",
    "input_layer",
    "layout",
    "color_mode",
    "dimensions",
    "mean",
    "scale",
    "max_dimension",
    "min_dimension",
    "keep_aspect_ratio",
    "crop_method",
    "crop_ratio",
}
OUTPUT_PARAMS = {
    "element_type",
    "probabilities_layer",
    "probabilities_transform",
    "features_url",
    "features_checksum",
    "boxes_layer",
    "classes_layer",
    "masks_layer",
    "probabilities_checksum",
    # c3sr/dlframework framework/predictor/image_predictor.go GetBackgroundIndex, GetBoxIndex,
    # GetBoxScaling (detection outputs; rai-project/dlframework reads none of them)
    "background_index",
    "ymin_index",
    "xmin_index",
    "ymax_index",
    "xmax_index",
    "scale_width",
    "scale_height",
}

KNOWN_LABEL_FILES: dict[str, tuple[str, int]] = {
    # md5 (features_checksum) -> (repliscope labels source, class count)
    "4d234b5833aca44928065a180db3016a": ("builtin:imagenet-1k", 1000),  # store.carml.org/synsets/imagenet/synset.txt
    # .../synset1.txt (TF-slim models, 1001 outputs): 'unknown unknown' then synset.txt, the wnid order
    "6c05083991207dea5c37f2d271014fad": ("builtin:imagenet-1001-slim", 1001),
    # github.com/rai-project/carml-models data/ilsvrc12/det_synset_words.txt: the 200 ILSVRC detection synsets
    "fe0fe33bc8cb071f8ca73073d97973c6": ("builtin:ilsvrc-det-200", 200),
    # store.carml.org/synsets/imagenet/synset1000.txt (Caffe / CNTK / Caffe2 / TensorRT Inception-v3): the 1000
    # 'wnid name' lines in TensorFlow Inception's class order (kit fox first), rebuilt from
    # github.com/li-haoran/imagenet-prediction synset.txt @ c6bfc91 and matched by MD5
    "7315c2c8bffdb680cf8c5d2a7c45c363": ("builtin:imagenet-1k-tf", 1000),
    # .../synset1001.txt (MLPerf ResNet-50 v1.5): 'unknown unknown' then synset1000.txt
    "1aac07127a5d6b9b634d7e43626eef05": ("builtin:imagenet-1001-tf", 1001),
    # .../synset1008.txt (Inception 5h, 1008 outputs): synset1001.txt then 7 'unknown unknown' lines
    "2bb228d6cf55ae4e6409f55fc81fcfe7": ("builtin:imagenet-1008-tf", 1008),
    # .../synset-21k.txt (Inception-BN 21K): github.com/pertusa/InceptionBN-21K-for-Caffe synset.txt @ 8df2c5e
    # (CC0), byte for byte
    "851bbe06499cf53fa6f8fb72ad61e906": ("builtin:imagenet-21k-mxnet", 21841),
}
"""Classification label files identified by their MD5 (no download), each matched by content: the shipped file
of the builtin set has the manifests' MD5 (origins in :mod:`repliscope.datasets.label_sets`). ``4d234b58...`` is
byte for byte rai-project/carml-models ``data/ilsvrc12/synset_words.txt``, whose 1000 wnids are the order of
``builtin:imagenet-1k``; ``fe0fe33b...`` is that repository's ``det_synset_words.txt``; ``7315c2c8...``
(``synset1000.txt``) and ``851bbe06...`` (``synset-21k.txt``) were found in public repositories with the same MD5;
``6c050839...`` (``synset1.txt``), ``1aac0712...`` (``synset1001.txt``) and ``2bb228d6...`` (``synset1008.txt``)
are ``synset.txt`` / ``synset1000.txt`` with an ``unknown unknown`` first line (and, for 1008, seven such lines
last), the form of rai-project/tensorflow-go-examples ``image_classification/synset1001.txt``: rebuilt and
matched by MD5."""

LABEL_FILE_NOTES = {
    "6c05083991207dea5c37f2d271014fad": (
        "lists 1001 classes with 'unknown unknown' (TF-slim's background) at index 0, then the 1000 ImageNet "
        "classes in wnid order (tench first): class i of the model is ImageNet class i-1; scoring against "
        "1000-class ImageNet labels needs that offset"
    ),
    "1aac07127a5d6b9b634d7e43626eef05": (
        "lists 1001 classes with 'unknown unknown' at index 0, then the 1000 ImageNet classes in the order of "
        "TensorFlow's 2015 Inception graphs (kit fox first), not the wnid order (tench first) of TF-slim and "
        "MLPerf models (MLPerf's ResNet-50 scores argmax - 1 against wnid-ordered labels): on such a model "
        "MLModelScope named class i after the wrong synset (class 1, tench, was named 'kit fox'); the translation "
        "keeps the file as it ran: check the model's class order before reading names or scoring by name"
    ),
    "2bb228d6cf55ae4e6409f55fc81fcfe7": (
        "lists 1008 classes: 'unknown unknown' at index 0, the 1000 ImageNet classes in the order of "
        "TensorFlow's Inception graphs (kit fox first) at 1..1000 and 7 'unknown unknown' padding lines at "
        "1001..1007 (Inception 5h has 1008 outputs): class i of the model is that order's class i-1; scoring "
        "against 1000-class ImageNet labels needs that offset and order"
    ),
}
"""What the label files with more lines than classes mean (warned as ``mlmodelscope.label_offset``)."""

DETECTION_LABEL_FILES: dict[str, tuple[str, int, str]] = {
    # store.carml.org/synsets/coco/coco_labels_paper.txt: the features file of 21 of the 22 rai-project/tensorflow
    # boundingbox manifests. c3sr/tensorflow commit 889f2ca ("check all object detection models", 2021-02-01)
    # replaced it in 20 TF OD API manifests by coco_labels_paper_background.txt: a sign that it has no background
    # line, so labels[int32(class)] named class c after COCO id c + 1 (person -> the second name).
    "a830abf70aabcb873475cbf57e3ce380": (
        "builtin:coco-91",
        91,
        "this file is the 91 COCO paper names WITHOUT a background line (checked by content), "
        "so MLModelScope named class c after COCO id c + 1 (class 1, person, was named 'bicycle'); c3sr/tensorflow "
        "commit 889f2ca replaced it by coco_labels_paper_background.txt in 20 TF OD API manifests; the index, kept "
        "here, is not affected",
    ),
    # store.carml.org/synsets/coco/coco_labels_paper_background.txt (c3sr/tensorflow since 889f2ca)
    "17249a4106513972e03c00728e7cd380": (
        "builtin:coco-91",
        91,
        "it is the same list with a 'background' line first, so its index is the COCO id",
    ),
    # store.carml.org/synsets/pascal_voc/pascal_voc_lables_no_background.txt (MXNet/GluonCV VOC detectors)
    "5ae5d62183cfb6f6d3ac109359d06a1b": (
        "builtin:voc-20",
        20,
        "the 20 PASCAL VOC class names, aeroplane .. tvmonitor, index 0 = aeroplane",
    ),
    # .../pascal_voc/pascal_voc_labels.txt and .../deeplabv3_mnv2_pascal_train_aug_2018_01_29/pascal-voc-classes.txt
    "9ce439bcfb44c304e49a0fe1ae398f69": (
        "builtin:voc-21",
        21,
        "'background' then the 20 PASCAL VOC class names, index 0 = background",
    ),
    # store.carml.org/synsets/coco/coco_labels_2014_2017.txt (80 names: MXNet/GluonCV COCO detectors)
    "571d630ea11ec39c0b6e6e9ff216b151": (
        "builtin:coco-80",
        80,
        "the 80 COCO detection class names in id order, index 0 = person",
    ),
    # store.carml.org/synsets/coco/coco_labels_2014_2017_background.txt
    "e7103a997c945e0f87c49a03c9c56a1b": (
        "builtin:coco-80-background",
        81,
        "'background' then the 80 COCO class names, index 0 = background",
    ),
}
"""Detection label files by MD5 -> (labels source, count, what is known of the file). The class index
MLModelScope recorded is kept; it names the class through the file. Every MD5 here was checked by CONTENT: the
list written out (``tests/importers/test_mlmodelscope_corpus.py`` rebuilds each one) has exactly that MD5. The two
``coco_labels_paper`` files are the 91 names of the COCO paper (ids 1..91, incl. the 11 never annotated), without
and with a ``background`` first line: for TF Object Detection API graphs (class = COCO id) they translate to
``builtin:coco-91`` (index = id; the unannotated ids are ``N/A`` there, named e.g. ``street sign`` in the paper
list)."""


def other_labels_file(ctx: Ctx) -> str:
    """`` (--labels FILE has MD5 ...: another file)`` when a --labels file was given but does not match."""
    if ctx.labels_file is None:
        return ""
    return (
        f" (--labels {ctx.labels_file} has MD5 {hashlib.md5(ctx.labels_file.read_bytes()).hexdigest()}: another file)"
    )


def given_labels(ctx: Ctx, url: str, md5: str) -> dict[str, Any] | None:
    """``labels`` (plus ``names``, the class names, which the caller drops) from ``--labels FILE`` when its MD5
    is the manifest's ``features_checksum``, or whatever it is when the manifest has none (MLModelScope then
    downloaded the file unchecked; the warning says so); None when no file was given or it is another file.
    ``source`` is FILE as given: it resolves against the translated manifest's folder, so write the manifest
    next to it."""
    if ctx.labels_file is None:
        return None
    blob = ctx.labels_file.read_bytes()
    if md5 and hashlib.md5(blob).hexdigest() != md5:
        return None
    lines = blob.decode("utf-8", "replace").splitlines()
    names = [ln for ln in lines if ln.strip()]
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    inner = [i for i in range(last) if not lines[i].strip()]
    if inner:
        raise ctx.fail(
            "output.parameters.features_url",
            f"--labels {ctx.labels_file}: blank line {inner[0] + 1} inside the list; MLModelScope's GetLabels "
            "gave it a class index but repliscope's label files skip blank lines, so every later class "
            "would move (allowed: a file without blank lines between names)",
            "unknown_label_file",
        )
    ctx.warn(
        "labels_file",
        "output.parameters.features_url",
        f"{url} is --labels {ctx.labels_file} ("
        + (
            f"MD5 {md5} checked"
            if md5
            else "NOT checked: the manifest has no features_checksum, so make sure it is the file at that URL"
        )
        + f", {len(names)} classes, one per non-empty line as MLModelScope's GetLabels read it); labels.source "
        "names that path, relative to the translated manifest's folder",
    )
    return {
        "source": ctx.labels_file.as_posix(),
        "sha256": hashlib.sha256(blob).hexdigest(),
        "num_classes": len(names),
        "names": names,
    }


class Ctx:
    """The MLModelScope file being translated and the warnings collected so far."""

    def __init__(self, path: Path, labels_file: Path | None = None) -> None:
        self.path = path
        self.labels_file = labels_file
        """``--labels FILE`` (the user's copy of an unknown features file), or None."""
        self.warnings: list[ImportWarning] = []

    def warn(self, code: str, field: str, message: str) -> None:
        assert code in WARNING_CODES, code
        self.warnings.append(ImportWarning(f"mlmodelscope.{code}", field, message))

    def fail(self, field: str, message: str, reason: str = "invalid") -> ConfigImportError:
        assert reason in REFUSAL_REASONS, reason
        return ConfigImportError(f"{self.path}: {field}: {message}", reason)


class _Num(str):
    """A YAML number kept as the text the Go agents parse (``1.10`` stays ``1.10``, not ``1.1``)."""


class _RawLoader(yaml.SafeLoader):
    pass


def _raw_number(loader: yaml.SafeLoader, node: yaml.Node) -> _Num:
    return _Num(loader.construct_scalar(node))  # type: ignore[arg-type]


_RawLoader.add_constructor("tag:yaml.org,2002:int", _raw_number)
_RawLoader.add_constructor("tag:yaml.org,2002:float", _raw_number)


def load_raw(text: str, where: str) -> dict[str, Any]:
    """The manifest as a mapping, numbers kept as their source text (:class:`_Num`). The loader's limits
    (:func:`repliscope.importers.reading.check_yaml_limits`) are checked first: past them nothing is built."""
    from repliscope.importers.reading import check_yaml_limits

    check_yaml_limits(text, Path(where))
    try:
        data = yaml.load(text, Loader=_RawLoader)
    except yaml.YAMLError as exc:
        raise ConfigImportError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigImportError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def number(value: Any, where: str) -> float:
    """A numeric scalar (as Go's yaml.Unmarshal into float32 would accept it)."""
    if isinstance(value, bool) or value is None:
        raise ConfigImportError(f"{where}: expected a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigImportError(f"{where}: expected a number, got {value!r}") from exc
    from repliscope.importers.reading import finite

    return finite(out, where)


def triple(value: Any, where: str, default: float) -> list[float]:
    """``mean``/``scale``: a scalar (broadcast to 3) or a list (GetMeanImage/GetScale)."""
    if value is None:
        return [default] * 3
    if isinstance(value, list):
        vals = [number(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if len(vals) != 3:
            raise ConfigImportError(
                f"{where}: {len(vals)} values; preprocess_image.go indexes exactly 3 (one per colour channel)"
            )
        return vals
    v = number(value, where)
    return [v, v, v]


_CV = re.compile(r"^v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_OPS = ("!=", ">=", "=>", "<=", "=<", "~>", ">", "<", "=", "~", "^")


def _parts(ver: str, where: str) -> tuple[list[int], bool]:
    """Masterminds/semver v1 constraint version: (numbers padded with 0, dirty = a part missing or x)."""
    m = _CV.match(ver)
    if not m:
        raise ConfigImportError(f"{where}: {ver!r} is not a Masterminds/semver version")
    nums, dirty = [], False
    for g in m.group(1, 2, 3):
        if g is None or g in "xX*":
            dirty = True
            nums.append(0)
        else:
            nums.append(int(g))
    if m.group(1) in ("x", "X", "*"):
        return [0, 0, 0], True
    return nums, dirty


def _dirty_level(ver: str) -> int:
    """How many leading parts are given (1: major only, 2: major.minor, 3: full)."""
    m = _CV.match(ver)
    assert m is not None
    return sum(1 for g in m.group(1, 2, 3) if g is not None and g not in "xX*")


def _v(nums: list[int]) -> str:
    return ".".join(str(n) for n in nums)


def pep440_constraint(raw: str, where: str) -> str:
    """A Masterminds/semver v1.4.2 constraint (what dlframework's register.go checks) -> PEP 440.

    Bare and ``=`` versions with a missing part are tilde ranges (``1.12`` -> ``>=1.12.0,<1.13.0``);
    ``~1.2.3`` -> ``>=1.2.3,<1.3.0``; ``^1.2`` -> ``>=1.2.0,<2.0.0``. ``||`` (OR) cannot be written in PEP 440:
    refused here (the caller warns and keeps the first alternative).
    """
    text = raw.strip()
    if not text:
        raise ConfigImportError(f"{where}: empty version constraint")
    out: list[str] = []
    text = re.sub(r"(!=|>=|=>|<=|=<|~>|>|<|=|~|\^)\s+", r"\1", text)
    for piece in re.split(r"\s*,\s*|\s+", text):
        piece = piece.strip()
        if not piece:
            continue
        op = next((o for o in _OPS if piece.startswith(o)), "")
        ver = piece[len(op) :].strip()
        nums, dirty = _parts(ver, where)
        level = _dirty_level(ver) if dirty else 3
        if op in ("", "=") and not dirty:
            out.append(f"=={_v(nums)}")
        elif op in ("", "=", "~", "~>"):
            if level == 0:
                continue  # '*' / 'x': anything
            upper = [nums[0] + 1, 0, 0] if level == 1 else [nums[0], nums[1] + 1, 0]
            out += [f">={_v(nums)}", f"<{_v(upper)}"]
        elif op == "^":
            out += [f">={_v(nums)}", f"<{nums[0] + 1}.0.0"]
        elif op == "!=":
            out.append(f"!={_v(nums)}")
        elif op in (">=", "=>"):
            out.append(f">={_v(nums)}")
        elif op in ("<=", "=<"):
            out.append(f"<={_v(nums)}")
        elif op == "<":
            out.append(f"<{_v(nums)}")
        elif op == ">":
            if dirty and level >= 1:  # '>1.2' means above every 1.2.x
                nxt = [nums[0] + 1, 0, 0] if level == 1 else [nums[0], nums[1] + 1, 0]
                out.append(f">={_v(nxt)}")
            else:
                out.append(f">{_v(nums)}")
    return ",".join(out) if out else ">=0"
