"""Hints derived from the error's signature (:func:`repliscope.diff.pipeline.diagnosis.hints`), on small arrays:
the first signature that fits decides, and no later hint contradicts it."""

from __future__ import annotations

import numpy as np

from repliscope.diff.pipeline.diagnosis import hints


def _bytes(seed: int, shape: tuple[int, int, int] = (3, 24, 32)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.int64)


def test_a_uint8_wrap_around_is_named_as_256_over_std() -> None:
    """(x - 127) mod 256, then / 128, against (x - 127) / 128: exactly +2 = 256/128 where x < 127, 0 elsewhere."""
    x = _bytes(0)
    ref = ((x - 127) / 128).astype(np.float32)
    cand = (((x - 127) % 256) / 128).astype(np.float32)
    share = float(np.mean(x < 127))
    assert hints(ref, cand, "CHW", 1e-6, [128.0]) == [
        f"the error is exactly +2 on {share:.1%} of the values where the manifest's value is negative and 0 "
        "elsewhere: 256/std (std 128), an integer wrap-around (uint8 arithmetic modulo 256) before the division by "
        "the std: the mean subtracted (or the scale applied) on the bytes before the cast to float"
    ]


def test_per_channel_std_and_no_std() -> None:
    x = _bytes(1)
    std = np.array([58.395, 57.12, 57.375])[:, None, None]
    ref = ((x - 124) / std).astype(np.float32)
    cand = (((x - 124) % 256) / std).astype(np.float32)
    got = hints(ref, cand, "CHW", 1e-5, [58.395, 57.12, 57.375])
    assert len(got) == 1 and "[4.38, 4.48, 4.46]" in got[0] and "256/std (std [58.4, 57.1, 57.4])" in got[0]
    # without the manifest's std: the step and 256/step, no guess about a std
    plain = hints(ref, cand, "CHW", 1e-5)
    assert len(plain) == 1 and plain[0].endswith(
        ": a wrap-around or a quantisation step (256 / the step = [58.4, 57.1, 57.4])"
    )


def test_the_wrap_around_is_never_called_sharper() -> None:
    """The issue's wrong hint: 'sharper: nearest-neighbour' for the wrap-around."""
    x = _bytes(2)
    got = hints(((x - 127) / 128).astype(np.float32), (((x - 127) % 256) / 128).astype(np.float32), "CHW", 1e-6)
    assert len(got) == 1 and "sharper" not in got[0] and "smoother" not in got[0]


def _letterboxed(fill: float, inner: np.ndarray) -> np.ndarray:
    out = np.full((3, 20, 20), fill, np.float32)
    out[:, 4:16, :] = inner
    return out


def test_an_error_only_in_the_padding_band_names_the_border() -> None:
    inner = np.random.default_rng(3).random((3, 12, 20)).astype(np.float32)
    got = hints(_letterboxed(0.5, inner), _letterboxed(0.3, inner), "CHW", 1e-6)
    assert got == [
        "the error is confined to the padding band (rows 0-3 and 16-19): your border is [0.3, 0.3, 0.3] where the "
        "manifest's is [0.5, 0.5, 0.5]: another letterbox fill value"
    ]
    hwc = hints(_letterboxed(0.5, inner).transpose(1, 2, 0), _letterboxed(0.3, inner).transpose(1, 2, 0), "HWC", 1e-6)
    assert hwc == got


def test_an_error_only_inside_the_band_is_the_resampling() -> None:
    rng = np.random.default_rng(4)
    inner = rng.random((3, 12, 20)).astype(np.float32)
    smooth = (inner + np.roll(inner, 1, 1) + np.roll(inner, 1, 2) + np.roll(inner, (1, 1), (1, 2))) / 4
    got = hints(_letterboxed(0.5, inner), _letterboxed(0.5, smooth), "CHW", 1e-6)
    assert got[0] == (
        "the padding band (rows 0-3 and 16-19) matches; the error is confined to the image inside it: the border "
        "is right, the content differs (its decode, resampling or values)"
    )
    assert len(got) == 2 and got[1].startswith("the candidate is smoother")  # read inside the band only


def test_a_constant_shift_stays_a_constant_shift() -> None:
    ref = np.random.default_rng(5).random((3, 16, 16)).astype(np.float32)
    assert hints(ref, ref + np.float32(0.25), "CHW", 1e-6) == [
        "a per-channel constant offset [0.25, 0.25, 0.25]: another mean (or the mean in other units)"
    ]


def test_a_spatial_shift_is_read_from_the_content() -> None:
    rng = np.random.default_rng(6)
    y, x = np.mgrid[0:40, 0:40]
    big = np.stack([np.sin(x / 3.0) + np.cos(y / 4.0), np.sin((x + y) / 5.0), np.cos(x / 2.5) * np.sin(y / 3.5)])
    big = (big + rng.normal(0, 0.05, big.shape)).astype(np.float32)
    got = hints(big[:, 4:36, 4:36], big[:, 5:37, 4:36], "CHW", 1e-6)  # the window one row lower
    assert got[0] == "a spatial shift of +1 px (rows), +0 px (columns): a crop offset or size rounding (round vs floor)"


def test_noise_is_not_called_an_interpolation() -> None:
    """Noise makes an image 'sharper' by energy; the hint reads the error's correlation with the image's edges
    instead of calling it nearest-neighbour."""
    y, x = np.mgrid[0:32, 0:32]
    ref = np.stack([np.sin(x / 3.0), np.cos(y / 4.0), np.sin((x + y) / 5.0)]).astype(np.float32)
    noisy = ref + np.random.default_rng(7).uniform(-0.3, 0.3, ref.shape).astype(np.float32)
    [hint] = hints(ref, noisy, "CHW", 1e-6)
    assert hint.startswith("the error does not follow the image's edges (correlation with its Laplacian ")
    assert hint.endswith("): noise, dithering or another JPEG decoder, not an interpolation or a geometry change")
    # an interpolation's error follows the edges: a box blur of a texture is still "smoother"
    rough = np.random.default_rng(8).random((3, 16, 16)).astype(np.float32)
    blurred = (rough + np.roll(rough, 1, 1) + np.roll(rough, 1, 2) + np.roll(rough, (1, 1), (1, 2))) / 4
    assert hints(rough, blurred, "CHW", 1e-6)[-1].startswith("the candidate is smoother")
