"""Builtin label sets shipped as package data, beyond ``imagenet-1k`` and the COCO sets.

Each file in ``data/`` holds the exact bytes of a public label list that model manifests point to (MLModelScope's
``features_url`` files, identified by their MD5 in :mod:`repliscope.importers.mlmodelscope_rules`); the class
index is the line number (0-based), the name is the line (``wnid name`` lines give the name after the wnid).

==============================  =====  ==================================================================
source                          count  content
==============================  =====  ==================================================================
``builtin:voc-20``              20     PASCAL VOC classes, ``aeroplane`` .. ``tvmonitor`` (no background)
``builtin:voc-21``              21     ``background`` then the 20 VOC classes
``builtin:coco-80-background``  81     ``background`` then the 80 COCO detection classes (id order)
``builtin:ilsvrc-det-200``      200    the ILSVRC 2013-2017 detection synsets (``wnid name``, wnid order)
``builtin:imagenet-1k-tf``      1000   the ImageNet-1k ``wnid name`` lines in TensorFlow Inception's class order
``builtin:imagenet-21k-mxnet``  21841  the ImageNet-21k synsets of MXNet's Inception-BN full model (``wnid name``)
``builtin:imagenet-1001-slim``  1001   ``unknown unknown`` (TF-slim's background) then ``imagenet-1k``'s wnid order
``builtin:imagenet-1001-tf``    1001   ``unknown unknown`` then the 1000 lines of ``imagenet-1k-tf``
``builtin:imagenet-1008-tf``    1008   ``imagenet-1001-tf`` then 7 ``unknown unknown`` lines (Inception 5h)
``builtin:face``                1      ``face`` (face detectors: BlazeFace, MTCNN)
``builtin:coco-person``         1      ``person``, COCO category 1 (a detector scored on COCO's persons only)
``builtin:background-person``   2      ``background``, ``person`` (person / selfie segmentation masks)
==============================  =====  ==================================================================

The last three are the bundled examples' one- and two-class lists, so that an example manifest names no file
beside itself and uploads to the service as it is.

Origins of the two ImageNet orders (MLModelScope's ``synset1000.txt`` and ``synset-21k.txt``, MD5 ``7315c2c8...``
and ``851bbe06...``, matched byte for byte): ``imagenet_21k_mxnet.txt`` is ``synset.txt`` of
github.com/pertusa/InceptionBN-21K-for-Caffe @ 8df2c5ed3a754cd853b0c6b9643b04f28e12975c (CC0; the synsets of
dmlc's ImageNet-21k Inception-BN model); ``imagenet_1k_tf_inception.txt`` is the 1000 lines of
``builtin:imagenet-1k`` (WordNet glosses, as Caffe's ``synset_words.txt``) in the order of TensorFlow's Inception
graphs, taken from ``synset.txt`` of github.com/li-haoran/imagenet-prediction @
c6bfc91aff9a39b3bbcf4a5b99814bbf4999f0f2 (``index<TAB>wnid<TAB>name`` lines: the index column and trailing
blanks dropped).

The three sets with ``unknown unknown`` lines are CarML's ``synset1.txt`` (MD5 ``6c050839...``, the TF-slim
models), ``synset1001.txt`` (``1aac0712...``, MLPerf ResNet-50 v1.5) and ``synset1008.txt`` (``2bb228d6...``,
Inception 5h), found in no repository as such, rebuilt from their public parts and matched by MD5:
``synset1.txt`` is ``unknown unknown`` then rai-project/carml-models ``data/ilsvrc12/synset_words.txt`` @ e5ae2015
(= CarML's ``synset.txt``: BVLC Caffe's ILSVRC 2012 ``synset_words.txt``; that repository has no licence file);
``synset1001.txt`` is ``image_classification/synset1001.txt`` of github.com/rai-project/tensorflow-go-examples @
c919ab2947e59f007cd952a88ce6827ab69abf16 with a final newline added (``unknown unknown`` then the lines of
``imagenet_1k_tf_inception.txt``; NCSA-style licence, Copyright (c) 2017 Cheng Li, University of Illinois, whose
notice applies to that list); ``synset1008.txt`` is ``synset1001.txt`` plus seven ``unknown unknown`` lines.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

LABEL_SETS: dict[str, tuple[str, int]] = {
    "builtin:voc-20": ("pascal_voc_20.txt", 20),
    "builtin:voc-21": ("pascal_voc_21.txt", 21),
    "builtin:coco-80-background": ("coco_80_background.txt", 81),
    "builtin:ilsvrc-det-200": ("ilsvrc_det_200.txt", 200),
    "builtin:imagenet-1k-tf": ("imagenet_1k_tf_inception.txt", 1000),
    "builtin:imagenet-21k-mxnet": ("imagenet_21k_mxnet.txt", 21841),
    "builtin:imagenet-1001-slim": ("imagenet_1001_slim.txt", 1001),
    "builtin:imagenet-1001-tf": ("imagenet_1001_tf_inception.txt", 1001),
    "builtin:imagenet-1008-tf": ("imagenet_1008_tf_inception.txt", 1008),
    "builtin:face": ("face.txt", 1),
    "builtin:coco-person": ("coco_person.txt", 1),
    "builtin:background-person": ("background_person.txt", 2),
}
"""``labels.source`` word -> (file in ``repliscope/datasets/data``, class count)."""


def label_set_bytes(source: str) -> bytes:
    """The shipped file of ``source`` (one of :data:`LABEL_SETS`), byte for byte."""
    file_name, _ = LABEL_SETS[source]
    return resources.files("repliscope.datasets").joinpath("data", file_name).read_bytes()


@cache
def label_set(source: str) -> tuple[str, ...]:
    """The class names of ``source``: one per non-empty line; a ``wnid name`` line gives ``name``."""
    names = []
    for line in label_set_bytes(source).decode("utf-8").splitlines():
        if not line.strip():
            continue
        head, sep, rest = line.partition(" ")
        names.append(rest.strip() if sep and head.startswith("n") and head[1:].isdigit() else line.strip())
    return tuple(names)
