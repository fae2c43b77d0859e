"""The catalogue the serve load test searches: real photos plus augmented variants.

Each source photo (``SOURCE/<class>/<image>``) gives variants 0, 1, 2, ...: variant 0 is
the photo itself, resized; the others are a random crop (45-100 % of the area), a
flip, and a brightness / contrast / colour jitter, each drawn from a generator seeded
with the photo's path and the variant number, so the same command writes the same
bytes. Every variant is a square JPEG in ``OUT/<class>/<stem>_<variant>.jpg``, so the
catalogue is a folder ``keras-dml index --images`` reads as it is.

    python -m benchmarks.serve_load_catalogue SOURCE OUT --count 100000 [--size 112]

Files already present are kept (a stopped build continues where it stopped).
"""

import argparse
import math
import os
import time
import zlib

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

__all__ = ["IMAGE_SUFFIXES", "build", "source_photos", "variant", "write_variants"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def source_photos(source):
    """The photos under ``source/<class>/``, sorted, as ``(class, path)`` pairs."""
    photos = []
    for name in sorted(os.listdir(source)):
        folder = os.path.join(source, name)
        if not os.path.isdir(folder) or name.startswith("."):
            continue
        photos.extend((name, os.path.join(folder, file)) for file in sorted(os.listdir(folder))
                      if file.lower().endswith(IMAGE_SUFFIXES))
    if not photos:
        raise FileNotFoundError(f"{source} has no photos in class folders (<class>/<image>).")
    return photos


def variant(image, seed, number, size):
    """Variant ``number`` of an RGB ``image``: the photo itself for 0, else a seeded
    crop, flip and colour jitter; always ``size`` x ``size``."""
    if number == 0:
        return ImageOps.fit(image, (size, size), Image.BILINEAR)
    rng = np.random.default_rng([seed, number])
    width, height = image.size
    side = math.sqrt(rng.uniform(0.45, 1.0)) * min(width, height)
    left = rng.uniform(0, width - side)
    top = rng.uniform(0, height - side)
    out = image.resize((size, size), Image.BILINEAR, box=(left, top, left + side, top + side))
    if rng.random() < 0.5:
        out = ImageOps.mirror(out)
    for enhancer in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        out = enhancer(out).enhance(rng.uniform(0.7, 1.3))
    return out


def write_variants(photos, out, numbers, size=112, limit=None):
    """Writes variants ``numbers`` of each ``(class, path)`` photo under ``out`` (at most
    ``limit`` files in all); returns the paths, those already present included."""
    paths = []
    for label, path in photos:
        stem = os.path.splitext(os.path.basename(path))[0]
        targets = [(number, os.path.join(out, label, f"{stem}_{number:02d}.jpg"))
                   for number in numbers]
        if limit is not None:
            targets = targets[:limit - len(paths)]
        missing = [(number, target) for number, target in targets if not os.path.exists(target)]
        if missing:
            os.makedirs(os.path.join(out, label), exist_ok=True)
            with Image.open(path) as image:
                image.draft("RGB", (size * 3, size * 3))
                image = image.convert("RGB")
                seed = zlib.crc32(f"{label}/{stem}".encode())
                for number, target in missing:
                    partial = target + ".part"
                    variant(image, seed, number, size).save(partial, "JPEG", quality=90)
                    os.replace(partial, target)
        paths.extend(target for _, target in targets)
        if limit is not None and len(paths) >= limit:
            break
    return paths


def build(source, out, count, size=112):
    """A catalogue of ``count`` images under ``out``: ``ceil(count / photos)`` variants
    of each photo in ``source``, the last photos' variants cut at ``count``."""
    photos = source_photos(source)
    per_photo = math.ceil(count / len(photos))
    return write_variants(photos, out, range(per_photo), size, limit=count)


def main(argv=None):
    """Builds the catalogue the command line asks for."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="photos in class folders, SOURCE/<class>/<image>")
    parser.add_argument("out", help="catalogue folder (written as OUT/<class>/<image>)")
    parser.add_argument("--count", type=int, default=100_000, help="images (default 100000)")
    parser.add_argument("--size", type=int, default=112, help="side in pixels (default 112)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    paths = build(args.source, args.out, args.count, args.size)
    print(f"{len(paths)} images in {args.out} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
