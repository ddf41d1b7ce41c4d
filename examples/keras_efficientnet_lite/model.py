"""EfficientNet-Lite0 in Keras 3, written by hand from the architecture (not converted automatically).

The reference is the PyTorch port ``efficientnet_lite_pytorch`` (``EfficientNet.from_name('efficientnet-lite0')``),
itself a port of the TensorFlow original (tensorflow/tpu, models/official/efficientnet/lite). Every place where a
naive port goes wrong is marked ``WHY:`` below. Layout: Keras works channels-last (NHWC); torch is NCHW. The
weights are converted by ``repliscope convert`` with ``mapping.yaml`` (same folder); nothing here knows about torch.

Layer names follow the torch module tree so the mapping stays readable::

    torch module                    Keras layer(s)
    _conv_stem                      stem_pad + stem_conv        (the torch conv pads inside the module)
    _bn0, _swish (1st call)         stem_bn, stem_relu
    _blocks.{i}._expand_conv        block{i}_expand_conv        (1x1: no padding)
    _blocks.{i}._bn0                block{i}_expand_bn
    _blocks.{i}._depthwise_conv     block{i}_dw_pad + block{i}_dw_conv
    _blocks.{i}._bn1                block{i}_dw_bn
    _blocks.{i}._swish              block{i}_expand_relu (1st call), block{i}_dw_relu (2nd call)
    _blocks.{i}._project_conv       block{i}_project_conv
    _blocks.{i}._bn2                block{i}_project_bn
    (x + inputs in forward())       block{i}_add
    _conv_head, _bn1, _swish (2nd)  head_conv, head_bn, head_relu
    _avg_pooling                    avg_pool
    (x.view(bs, -1) in forward())   flatten
    _dropout, _fc                   dropout, fc

``build_model()`` takes one keyword per classic porting bug (all off by default); ``bugs.py`` names the variants.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Keras 3 picks its backend when first imported: choose TensorFlow before the import below.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
from keras import layers

# WHY 1e-3: the torch port builds every BatchNorm2d with eps=global_params.batch_norm_epsilon = 1e-3 (the
# TensorFlow value it was ported from), NOT torch's default 1e-5. Keras' default happens to be 1e-3 too, but we
# spell it out: a port from "plain torch" code would copy 1e-5 and be subtly wrong on every BN.
BN_EPSILON = 1e-3
# Momentum only matters when training; 0.99 in Keras = 1 - 0.01 in torch (the two frameworks define it
# the other way round). Given for completeness, irrelevant at inference.
BN_MOMENTUM = 0.99


@dataclass(frozen=True)
class Stage:
    """One row of the Lite0 block table (``efficientnet_lite_builder.py``): repeats, kernel, first stride,
    expansion ratio, output channels. Lite has no squeeze-excite and keeps stem (32) and head (1280) fixed."""

    repeats: int
    kernel: int
    stride: int
    expand: int
    out_channels: int


LITE0_STAGES: tuple[Stage, ...] = (
    Stage(1, 3, 1, 1, 16),
    Stage(2, 3, 2, 6, 24),
    Stage(2, 5, 2, 6, 40),
    Stage(3, 3, 2, 6, 80),
    Stage(3, 5, 1, 6, 112),
    Stage(4, 5, 2, 6, 192),
    Stage(1, 3, 1, 6, 320),
)


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """(before, after) padding of the torch port's ``Conv2dStaticSamePadding`` for one spatial axis.

    WHY explicit: the torch module computes this once, for the declared image size, and pads with
    ``ZeroPad2d((pad // 2, pad - pad // 2))``: the output is ceil(size / stride) and the odd pixel goes to the
    bottom/right. For stride 2 that is ASYMMETRIC (k=3 on 224 -> (0, 1); k=5 on 56 -> (1, 2)), i.e. exactly
    TensorFlow's 'SAME' rule and NOT torch's usual symmetric ``padding=k // 2`` (which would give (1, 1) and
    shift the whole feature map by one pixel). We pad explicitly with ZeroPadding2D and convolve 'valid' so the
    Keras pair takes the same input as the torch module and the padding is visible in the layer list.
    """
    out = math.ceil(size / stride)
    pad = max((out - 1) * stride + kernel - size, 0)
    return pad // 2, pad - pad // 2


def _pad(size: int, kernel: int, stride: int, *, symmetric: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    if symmetric:  # the porting bug: torch-style padding=k//2 on both sides
        p = kernel // 2
        return (p, p), (p, p)
    before, after = same_padding(size, kernel, stride)
    return (before, after), (before, after)


def _batch_norm(name: str, epsilon: float) -> layers.BatchNormalization:
    # WHY axis=-1: channels-last. gamma/beta/moving_mean/moving_variance <- torch weight/bias/running_mean/running_var
    return layers.BatchNormalization(axis=-1, momentum=BN_MOMENTUM, epsilon=epsilon, name=name)


def _activation(name: str, swish: bool) -> layers.Layer:
    # WHY ReLU6: Lite replaces EfficientNet's swish by ReLU6 (quantization friendly). The torch library's
    # set_swish() silently switches it back to swish; a port copied from EfficientNet-B0 code would too.
    if swish:
        return layers.Activation("swish", name=name)
    return layers.ReLU(max_value=6.0, name=name)


class ReverseChannels(layers.Layer):
    """RGB <-> BGR: reverses the last (channel) axis. Only used by the bug zoo (``bgr_input=True``)."""

    def call(self, inputs: Any) -> Any:
        return keras.ops.flip(inputs, axis=-1)


def build_model(
    image_size: int = 224,
    num_classes: int = 1000,
    dropout_rate: float = 0.2,
    stages: Sequence[Stage] = LITE0_STAGES,
    *,
    bn_epsilon: float = BN_EPSILON,
    bn_epsilon_overrides: dict[str, float] | None = None,
    symmetric_padding_layers: Sequence[str] = (),
    swish_layers: Sequence[str] = (),
    fc_use_bias: bool = True,
    bgr_input: bool = False,
) -> keras.Model:
    """EfficientNet-Lite0 as a Keras functional model: NHWC float input ``(None, image_size, image_size, 3)``
    pre-processed like the torch model ((x - 127) / 128, RGB), logits ``(None, num_classes)`` out.

    The keyword-only arguments inject ONE classic porting bug each (see ``bugs.py``); the defaults are correct:
    ``bn_epsilon`` for every BN or ``bn_epsilon_overrides`` ({layer name: eps}) for some; the names of pad
    layers (e.g. ``"block3_dw_pad"``) that use symmetric torch-style padding; the names of ReLU6 layers replaced
    by swish; ``fc_use_bias=False`` drops the classifier bias; ``bgr_input`` reverses the channels at the input.
    """
    eps_for = dict(bn_epsilon_overrides or {})

    def bn(name: str) -> layers.BatchNormalization:
        return _batch_norm(name, eps_for.get(name, bn_epsilon))

    def act(name: str) -> layers.Layer:
        return _activation(name, swish=name in swish_layers)

    def pad(name: str, size: int, kernel: int, stride: int) -> layers.ZeroPadding2D:
        return layers.ZeroPadding2D(_pad(size, kernel, stride, symmetric=name in symmetric_padding_layers),
                                    name=name)

    inputs = keras.Input((image_size, image_size, 3), name="image")
    x = inputs
    if bgr_input:
        x = ReverseChannels(name="input_reverse_channels")(x)

    # Stem: 3x3 stride-2 conv, 32 channels (fixed in Lite: fix_head_stem), no bias (the BN follows).
    size = image_size
    x = pad("stem_pad", size, 3, 2)(x)
    x = layers.Conv2D(32, 3, strides=2, padding="valid", use_bias=False, name="stem_conv")(x)
    size = math.ceil(size / 2)
    x = bn("stem_bn")(x)
    x = act("stem_relu")(x)

    # MBConv blocks, numbered like torch's _blocks.{i}. Only the first block of a stage strides / changes width.
    channels = 32
    i = 0
    for stage in stages:
        for r in range(stage.repeats):
            stride = stage.stride if r == 0 else 1
            x = _mbconv(x, i, channels, stage, stride, size, bn=bn, act=act, pad=pad)
            size = math.ceil(size / stride)
            channels = stage.out_channels
            i += 1

    # Head: 1x1 conv to 1280 (fixed in Lite), BN, ReLU6, global average pool, dropout, classifier.
    x = layers.Conv2D(1280, 1, use_bias=False, name="head_conv")(x)
    x = bn("head_bn")(x)
    x = act("head_relu")(x)
    # WHY keepdims: torch's AdaptiveAvgPool2d(1) returns (N, C, 1, 1) and forward() flattens afterwards with
    # x.view(bs, -1); keeping both steps makes each Keras layer produce what its torch module produces.
    x = layers.GlobalAveragePooling2D(keepdims=True, name="avg_pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(dropout_rate, name="dropout")(x)  # identity at inference, like torch's eval()
    # WHY a Dense kernel is (in, out): torch's Linear weight is (out, in); the converter transposes it.
    outputs = layers.Dense(num_classes, use_bias=fc_use_bias, name="fc")(x)
    return keras.Model(inputs, outputs, name="efficientnet_lite0")


def _mbconv(x: Any, i: int, in_channels: int, stage: Stage, stride: int, size: int, *, bn: Any, act: Any,
            pad: Any) -> Any:
    """Inverted residual block ``_blocks.{i}``: [1x1 expand, BN, ReLU6] -> kxk depthwise, BN, ReLU6 ->
    1x1 project, BN -> + input when the shape is unchanged. No squeeze-excite (Lite)."""
    inputs = x
    mid = in_channels * stage.expand
    if stage.expand != 1:  # the first block (expand ratio 1) has no expansion conv at all
        x = layers.Conv2D(mid, 1, use_bias=False, name=f"block{i}_expand_conv")(x)
        x = bn(f"block{i}_expand_bn")(x)
        x = act(f"block{i}_expand_relu")(x)
    x = pad(f"block{i}_dw_pad", size, stage.kernel, stride)(x)
    # WHY DepthwiseConv2D: torch expresses depthwise as Conv2d(groups=C) with weight (C, 1, kh, kw); Keras has
    # a dedicated layer whose kernel is (kh, kw, C, depth_multiplier=1).
    x = layers.DepthwiseConv2D(stage.kernel, strides=stride, padding="valid", use_bias=False,
                               name=f"block{i}_dw_conv")(x)
    x = bn(f"block{i}_dw_bn")(x)
    x = act(f"block{i}_dw_relu")(x)
    x = layers.Conv2D(stage.out_channels, 1, use_bias=False, name=f"block{i}_project_conv")(x)
    x = bn(f"block{i}_project_bn")(x)  # linear bottleneck: no activation after the projection
    # WHY this condition: torch adds the skip only for stride 1 and equal widths (id_skip is always on in Lite).
    # Drop-connect (stochastic depth) is training-only, so inference is a plain add.
    if stride == 1 and in_channels == stage.out_channels:
        x = layers.Add(name=f"block{i}_add")([x, inputs])
    return x
