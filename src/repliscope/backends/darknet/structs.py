"""Exact ctypes layouts of libdarknet's ``struct layer`` and ``struct network`` for Debian's build
(``darknet`` 0.0.0+git20180914, CPU only: no ``GPU`` / ``CUDNN`` members), field for field as
``/usr/lib/darknet/include/darknet.h`` (shipped in the package) declares them.

Every field is here, in order, with its C type's ctypes twin (enums are ``int``, every pointer is ``c_void_p``,
``size_t`` is ``c_size_t``), so ``sizeof`` and every offset match the compiler's (checked in
``tests/yolo/test_darknet_layers.py`` by compiling ``offsetof`` of every field against the header). The layer's
``forward`` is ``void (*)(struct layer, struct network)``: both structs passed by value (:data:`FORWARD`).
"""

from __future__ import annotations

import ctypes
from ctypes import Structure, c_float, c_int, c_size_t, c_void_p

_Run = tuple[type, str | tuple[str, ...]]


def _fields(runs: tuple[_Run, ...]) -> list[tuple[str, type]]:
    """(ctype, "name name ...") runs in declaration order -> ``_fields_``."""
    out: list[tuple[str, type]] = []
    for ctype, names in runs:
        text = names if isinstance(names, str) else "".join(names)
        out.extend((name, ctype) for name in text.split())
    return out


_LAYER_RUNS: tuple[_Run, ...] = (
    (c_int, "type activation cost_type"),
    (c_void_p, "forward backward update forward_gpu backward_gpu update_gpu"),
    (
        c_int,
        (
            "batch_normalize shortcut batch forced flipped inputs outputs nweights nbiases extra truths "
            "h w c out_h out_w out_c n max_boxes groups size side stride reverse flatten spatial pad "
            "sqrt flip index binary xnor steps hidden truth"
        ),
    ),
    (c_float, "smooth dot angle jitter saturation exposure shift ratio learning_rate_scale clip"),
    (c_int, "noloss softmax classes coords background rescore objectness joint noadjust reorg log tanh"),
    (c_void_p, "mask"),
    (c_int, "total"),
    (c_float, "alpha beta kappa coord_scale object_scale noobject_scale mask_scale class_scale"),
    (c_int, "bias_match random"),
    (c_float, "ignore_thresh truth_thresh thresh focus"),
    (c_int, "classfix absolute onlyforward stopbackward dontload dontsave dontloadscales numload"),
    (c_float, "temperature probability scale"),
    (
        c_void_p,
        (
            "cweights indexes input_layers input_sizes map counts sums rand cost state prev_state "
            "forgot_state forgot_delta state_delta combine_cpu combine_delta_cpu concat concat_delta "
            "binary_weights biases bias_updates scales scale_updates weights weight_updates delta "
            "output loss squared norms spatial_mean mean variance mean_delta variance_delta "
            "rolling_mean rolling_variance x x_norm m v bias_m bias_v scale_m scale_v z_cpu r_cpu h_cpu "
            "prev_state_cpu temp_cpu temp2_cpu temp3_cpu dh_cpu hh_cpu prev_cell_cpu cell_cpu f_cpu "
            "i_cpu g_cpu o_cpu c_cpu dc_cpu binary_input input_layer self_layer output_layer "
            "reset_layer update_layer state_layer input_gate_layer state_gate_layer input_save_layer "
            "state_save_layer input_state_layer state_state_layer input_z_layer state_z_layer "
            "input_r_layer state_r_layer input_h_layer state_h_layer wz uz wr ur wh uh uo wo uf wf ui "
            "wi ug wg softmax_tree"
        ),
    ),
    (c_size_t, "workspace_size"),
)

_NETWORK_RUNS: tuple[_Run, ...] = (
    (c_int, "n batch"),
    (c_void_p, "seen t"),
    (c_float, "epoch"),
    (c_int, "subdivisions"),
    (c_void_p, "layers output"),
    (c_int, "policy"),
    (c_float, "learning_rate momentum decay gamma scale power"),
    (c_int, "time_steps step max_batches"),
    (c_void_p, "scales steps"),
    (c_int, "num_steps burn_in adam"),
    (c_float, "B1 B2 eps"),
    (c_int, "inputs outputs truths notruth h w c max_crop min_crop"),
    (c_float, "max_ratio min_ratio"),
    (c_int, "center"),
    (c_float, "angle aspect exposure saturation hue"),
    (c_int, "random gpu_index"),
    (c_void_p, "hierarchy input truth delta workspace"),
    (c_int, "train index"),
    (c_void_p, "cost"),
    (c_float, "clip"),
)


class LAYER(Structure):
    """``struct layer`` (190 fields)."""

    _fields_ = _fields(_LAYER_RUNS)


class NETWORK(Structure):
    """``struct network`` (54 fields)."""

    _fields_ = _fields(_NETWORK_RUNS)


FORWARD = ctypes.CFUNCTYPE(None, LAYER, NETWORK)
"""``void (*forward)(struct layer, struct network)``."""

LAYER_TYPES: tuple[str, ...] = (
    "CONVOLUTIONAL",
    "DECONVOLUTIONAL",
    "CONNECTED",
    "MAXPOOL",
    "SOFTMAX",
    "DETECTION",
    "DROPOUT",
    "CROP",
    "ROUTE",
    "COST",
    "NORMALIZATION",
    "AVGPOOL",
    "LOCAL",
    "SHORTCUT",
    "ACTIVE",
    "RNN",
    "GRU",
    "LSTM",
    "CRNN",
    "BATCHNORM",
    "NETWORK",
    "XNOR",
    "REGION",
    "YOLO",
    "ISEG",
    "REORG",
    "UPSAMPLE",
    "LOGXENT",
    "L2NORM",
    "BLANK",
)
"""``LAYER_TYPE`` in enum order (``layer.type`` indexes it)."""
