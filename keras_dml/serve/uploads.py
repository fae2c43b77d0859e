"""Checks of an uploaded image before anything decodes it: size, format and dimensions.

Only the file's headers are read (Pillow's lazy `Image.open` parses them without
decoding pixels), so an image whose dimensions exceed the bounds, a
decompression bomb among them, is refused before TensorFlow's decoder runs. The
decoder decodes every frame of an animated GIF (the model then sees the first):
the pixels bounded are those of all frames. An animated WebP, which the decoder
does not read, is refused as what it is.
"""

import dataclasses
import io
import warnings

__all__ = ["FORMATS", "ImageLimits", "UploadError", "check_image"]

#: Pillow's names of the formats TensorFlow's `decode_image` reads.
FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP")


class UploadError(ValueError):
    """An upload refused, with the HTTP status to answer (400, 413 or 415)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class ImageLimits:
    """Bounds of an upload: `max_bytes` of file, `max_side` pixels on either
    side and `max_pixels` in all (width x height)."""

    max_bytes: int = 10 * 1024 * 1024
    max_side: int = 8192
    max_pixels: int = 40_000_000  # over all the frames of an animated image


def check_image(data, limits=ImageLimits()):
    """The Pillow format name of an encoded image, read from its header only.

    Raises:
        UploadError: Empty, past `limits.max_bytes` (413), not an image of
            `FORMATS`, an animated WebP (415), or dimensions past `limits` (413;
            the pixels of all an animated GIF's frames count).
    """
    if not data:
        raise UploadError("the uploaded file is empty.")
    if len(data) > limits.max_bytes:
        raise UploadError(f"the uploaded file has {len(data)} bytes, more than the limit of "
                          f"{limits.max_bytes}.", 413)
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning: bounds below
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height, format = image.width, image.height, image.format
                frames = getattr(image, "n_frames", 1)  # GIF: walks the frames undecoded
        except Image.DecompressionBombError:
            raise UploadError(f"the image's header claims more than {limits.max_pixels} "
                              "pixels, past the limit (a decompression bomb?).", 413) from None
        except Exception:  # Pillow raises UnidentifiedImageError, SyntaxError, struct.error...
            raise UploadError("the uploaded file is not an image (JPEG, PNG, GIF, BMP or "
                              "WebP) or its header is damaged.") from None
    if format not in FORMATS:
        raise UploadError(f"the uploaded file is a {format} image; send JPEG, PNG, GIF, BMP "
                          "or WebP.")
    if format == "WEBP" and frames > 1:
        raise UploadError(f"the image is an animated WebP ({frames} frames), which the "
                          "decoder does not read: send a still image (its first frame).", 415)
    if frames > 1 and width * height * frames > limits.max_pixels:
        raise UploadError(f"the image is an animated {format} of {frames} frames of "
                          f"{width}x{height} pixels, {width * height * frames} pixels in all "
                          f"(every frame is decoded), past the limit of {limits.max_pixels}.",
                          413)
    if max(width, height) > limits.max_side or width * height > limits.max_pixels:
        raise UploadError(f"the image is {width}x{height} pixels, past the limit of "
                          f"{limits.max_side} pixels a side and {limits.max_pixels} in all.",
                          413)
    return format
