"""tf2onnx handlers for TFLite custom ops that tf2onnx leaves unconverted.

``Convolution2DTransposeBias`` (MediaPipe, ``mediapipe/util/tflite/operations/transpose_conv_bias.cc``): a
transposed convolution with a bias, NHWC input, OHWI kernel, bias (O,); its options are a raw
``TfLiteTransposeConvParams`` struct ``{padding (1 SAME, 2 VALID), stride_width, stride_height}`` (int32 each), not a
flexbuffer, so tf2onnx reads no attribute: :func:`mediapipe_custom_options` reads them from the flatbuffer and the
handler becomes ``Transpose(NCHW) -> ConvTranspose(kernel IOHW, strides, pads) -> Transpose(NHWC)``. TFLite's
SAME output is ``in * stride``: ONNX pads ``total = max(k - s, 0)``, ``total // 2`` before (TF's SAME rule for the
equivalent convolution).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

MEDIAPIPE_TRANSPOSE_CONV = "Convolution2DTransposeBias"
HANDLERS_VERSION = "1"
"""Part of the conversion cache key: a conversion made with other handlers is another file."""


def mediapipe_custom_options(tflite_path: Path) -> dict[str, tuple[int, int, int]]:
    """Output tensor name -> (padding, stride_w, stride_h) of every ``Convolution2DTransposeBias`` op."""
    from tf2onnx.tflite.Model import Model

    buf = Path(tflite_path).read_bytes()
    model = Model.GetRootAsModel(buf, 0)
    codes = {i: (model.OperatorCodes(i).CustomCode() or b"").decode() for i in range(model.OperatorCodesLength())}
    out: dict[str, tuple[int, int, int]] = {}
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for i in range(graph.OperatorsLength()):
            op = graph.Operators(i)
            if codes.get(op.OpcodeIndex()) != MEDIAPIPE_TRANSPOSE_CONV or op.CustomOptionsIsNone():
                continue
            raw = op.CustomOptionsAsNumpy().tobytes()
            padding, stride_w, stride_h = struct.unpack("<3i", raw[:12])
            out[graph.Tensors(op.Outputs(0)).Name().decode()] = (padding, stride_w, stride_h)
    return out


def custom_op_handlers(tflite_path: Path) -> dict[str, tuple[Any, list[Any]]]:
    """tf2onnx's ``custom_op_handlers`` for the model at ``tflite_path`` ({} when it has none of these ops)."""
    options = mediapipe_custom_options(tflite_path)
    if not options:
        return {}

    def transpose_conv_bias(ctx: Any, node: Any, name: str, args: list[Any]) -> None:
        padding, stride_w, stride_h = options[node.output[0]]
        kernel = ctx.get_shape(node.input[1])
        if kernel is None or len(kernel) != 4 or padding not in (1, 2):
            raise ValueError(f"{MEDIAPIPE_TRANSPOSE_CONV} {node.output[0]}: kernel shape {kernel}, padding {padding}")
        _, kh, kw, _ = kernel
        pads = [0, 0, 0, 0]
        if padding == 1:  # SAME
            th, tw = max(kh - stride_h, 0), max(kw - stride_w, 0)
            pads = [th // 2, tw // 2, th - th // 2, tw - tw // 2]
        to_nchw = ctx.insert_new_node_on_input(node, "Transpose", node.input[0], perm=[0, 3, 1, 2])
        to_nchw.skip_conversion = True
        to_iohw = ctx.insert_new_node_on_input(node, "Transpose", node.input[1], perm=[3, 0, 1, 2])
        to_iohw.skip_conversion = True
        node.type = "ConvTranspose"
        for key in list(node.attr):
            del node.attr[key]
        node.set_attr("kernel_shape", [kh, kw])
        node.set_attr("strides", [stride_h, stride_w])
        node.set_attr("pads", pads)
        shape = ctx.get_shape(node.output[0])
        dtype = ctx.get_dtype(node.output[0])
        back = ctx.insert_new_node_on_output("Transpose", node.output[0], perm=[0, 2, 3, 1])
        back.skip_conversion = True
        ctx.set_shape(back.output[0], shape)
        ctx.set_dtype(back.output[0], dtype)
        if shape is not None:
            ctx.set_shape(node.output[0], [shape[0], shape[3], shape[1], shape[2]])

    return {f"TFL_{MEDIAPIPE_TRANSPOSE_CONV}": (transpose_conv_bias, [])}
