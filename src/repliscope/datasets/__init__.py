"""Datasets and label rules. Every registration is listed here, as a lazy ``module:attr`` target."""

from repliscope.datasets.base import DATASETS, LABEL_RULES, Dataset, Sample
from repliscope.datasets.classes import imagenet_classes
from repliscope.datasets.foolbox_data import load_foolbox_imagenet
from repliscope.datasets.image_folder import load_image_folder
from repliscope.datasets.resolve import resolve_dataset

DATASETS.add("image_folder", "repliscope.datasets.image_folder:load_image_folder")
DATASETS.add("foolbox_imagenet", "repliscope.datasets.foolbox_data:load_foolbox_imagenet")
DATASETS.add("coco", "repliscope.datasets.coco:load_coco")
DATASETS.add("dlib_xml", "repliscope.datasets.dlib_xml:load_dlib_xml")
DATASETS.add("voc_xml", "repliscope.datasets.voc_xml:load_voc_xml")
DATASETS.add("voc_seg", "repliscope.datasets.voc_seg:load_voc_seg")
DATASETS.add("synthetic_detection", "repliscope.datasets.synthetic_detection:load_synthetic_detection")

LABEL_RULES.add("imagenet_wnid", "repliscope.datasets.labels:imagenet_wnid")
LABEL_RULES.add("filename_index", "repliscope.datasets.labels:filename_index")
LABEL_RULES.add("subfolders", "repliscope.datasets.labels:subfolders")
LABEL_RULES.add("csv", "repliscope.datasets.labels:csv_labels")
LABEL_RULES.add("none", "repliscope.datasets.labels:unlabelled")

__all__ = [
    "DATASETS",
    "LABEL_RULES",
    "Dataset",
    "Sample",
    "imagenet_classes",
    "load_foolbox_imagenet",
    "load_image_folder",
    "resolve_dataset",
]
