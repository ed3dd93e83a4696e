"""Safe image loading: every failure names the record and the file.

Paths reach this module already resolved by :func:`medbench_core.taskdata.task.resolve_inside`
(which refuses ``..``, absolute references and symbolic links); this module refuses what is
wrong with the bytes: missing or empty files, data PIL cannot decode, truncated files,
zero-size images, decompression bombs and pixel modes with no faithful RGB conversion.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from medbench_core.errors import DataError

# Modes PIL converts to RGB without losing the meaning of the pixels.
_DIRECT_MODES = {"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}
# Grey modes deeper than 8 bits (16-bit radiographs, float maps): PIL's own conversion clips
# at 255 and turns most of the image white, so they are rescaled from their min..max instead.
_DEEP_GREY_MODES = {"I", "F", "I;16", "I;16B", "I;16L", "I;16N"}

DEFAULT_MAX_PIXELS = 64_000_000


def load_image(path: str | Path, record_id: str, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Decode the image at ``path`` fully and return it as an 8-bit RGB PIL image.

    Raises :class:`DataError` naming ``record_id`` and ``path`` when the file is missing,
    empty, not an image PIL can decode, truncated, has a zero width or height, holds more
    than ``max_pixels`` pixels, or has a pixel mode with no RGB conversion. Images with an
    alpha channel lose it (as CLIP preprocessing does); 16-bit and float grey images are
    rescaled linearly from their own min..max to 0..255.
    """
    path = Path(path)
    where = f"record {record_id}: image {path}"
    if not path.exists():
        raise DataError(f"{where}: file not found; check the image reference")
    if not path.is_file():
        raise DataError(f"{where}: not a regular file")
    if path.stat().st_size == 0:
        raise DataError(f"{where}: file is empty (0 bytes); replace it with a valid image")
    try:
        with warnings.catch_warnings():
            # PIL warns (not raises) between MAX_IMAGE_PIXELS and twice that; our own limit decides.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                w, h = im.size
                if w <= 0 or h <= 0:
                    raise DataError(f"{where}: zero-size image ({w}x{h})")
                if w * h > max_pixels:
                    raise DataError(f"{where}: {w}x{h} pixels exceeds the limit of {max_pixels}; downscale it first")
                im.load()
                return _to_rgb(im, where)
    except DataError:
        raise
    except Image.DecompressionBombError as exc:
        raise DataError(f"{where}: refused as a decompression bomb ({exc})") from exc
    except UnidentifiedImageError as exc:
        raise DataError(f"{where}: not an image format PIL can read") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        # Truncated or corrupted data surfaces from load() as OSError / SyntaxError.
        raise DataError(f"{where}: unreadable image ({exc})") from exc


def _to_rgb(im: Image.Image, where: str) -> Image.Image:
    mode = im.mode
    if mode == "RGB":
        return im.copy()
    if mode in _DEEP_GREY_MODES:
        arr = np.asarray(im, dtype=np.float64)
        if not np.isfinite(arr).all():
            raise DataError(f"{where}: mode {mode} image holds NaN or infinite values")
        lo, hi = float(arr.min()), float(arr.max())
        scaled = np.zeros_like(arr) if hi == lo else (arr - lo) * (255.0 / (hi - lo))
        return Image.fromarray(np.rint(scaled).astype(np.uint8)).convert("RGB")
    if mode in _DIRECT_MODES:
        try:
            return im.convert("RGB")
        except (ValueError, OSError) as exc:
            raise DataError(f"{where}: cannot convert mode {mode} to RGB ({exc})") from exc
    raise DataError(f"{where}: pixel mode {mode!r} has no RGB conversion; save it as 8-bit RGB or greyscale")
