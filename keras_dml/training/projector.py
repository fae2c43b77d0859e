"""TensorBoard embedding projector files: vectors, metadata and a sprite of thumbnails.

`write_projector(log_dir, embeddings, labels, images=...)` writes into
`log_dir`:

    projector_config.pbtxt   tells TensorBoard's projector where the rest is
    vectors.tsv              one embedding per line, tab-separated
    metadata.tsv             header "label<TAB>class", one row per embedding
    sprite.png               thumbnails in a square grid, row-major (if images given)

Open with `tensorboard --logdir <log_dir>` (Projector tab). The files are
plain text and PNG: no checkpoint, no TensorFlow needed to read them.
"""

import math
import os

import numpy as np

__all__ = ["write_projector"]

SPRITE_LIMIT = 8192  # TensorBoard's maximum sprite side, in pixels


def write_projector(log_dir, embeddings, labels, images=None, paths=None, class_names=None,
                    thumbnail=32, max_points=10000, seed=0):
    """Writes the projector files of `embeddings` into `log_dir`; returns their paths.

    Args:
        log_dir: The TensorBoard log directory (created if needed).
        embeddings: float `(N, d)`.
        labels: `(N,)` class ids.
        images: Thumbnails' source, `(N, H, W)` or `(N, H, W, C)`, uint8 or
            float in [0, 1]. Defaults to None.
        paths: Instead of `images`, image files to decode. Defaults to None.
        class_names: Name per class id, for the metadata's `class` column.
            Defaults to None (the id).
        thumbnail: Largest thumbnail side in pixels (smaller if the sprite
            would exceed 8192 px). Defaults to 32.
        max_points: At most this many points, sampled uniformly with `seed`
            (the projector slows down beyond ~10k). Defaults to 10000.
        seed: Sampling seed. Defaults to 0.

    Returns:
        A dict name -> path of the files written.
    """
    embeddings = np.asarray(embeddings, dtype=np.float32)
    labels = np.asarray(labels).reshape(-1)
    if embeddings.ndim != 2 or len(embeddings) != len(labels) or not len(labels):
        raise ValueError(f"embeddings (N, d) and labels (N,) must match, got shapes "
                         f"{embeddings.shape} and {labels.shape}.")
    if images is not None and paths is not None:
        raise ValueError("Pass images or paths, not both.")
    keep = np.arange(len(labels))
    if len(keep) > max_points:
        keep = np.sort(np.random.default_rng(seed).choice(len(keep), max_points, replace=False))
    os.makedirs(log_dir, exist_ok=True)
    written = {"config": os.path.join(log_dir, "projector_config.pbtxt"),
               "vectors": os.path.join(log_dir, "vectors.tsv"),
               "metadata": os.path.join(log_dir, "metadata.tsv")}
    np.savetxt(written["vectors"], embeddings[keep], delimiter="\t", fmt="%.6g")
    with open(written["metadata"], "w") as f:
        f.write("label\tclass\n")
        for label in labels[keep]:
            name = class_names[int(label)] if class_names is not None else label
            f.write(f"{label}\t{_tsv_field(name)}\n")
    sprite_lines = ""
    if images is not None or paths is not None:
        thumbs = (_thumbnails_from_images(np.asarray(images)[keep], thumbnail)
                  if images is not None
                  else _thumbnails_from_paths([paths[i] for i in keep], thumbnail))
        side = min(thumbnail, SPRITE_LIMIT // math.ceil(math.sqrt(len(keep))))
        written["sprite"] = os.path.join(log_dir, "sprite.png")
        _write_sprite(written["sprite"], thumbs, side)
        sprite_lines = ('  sprite {\n    image_path: "sprite.png"\n'
                        f"    single_image_dim: {side}\n    single_image_dim: {side}\n  }}\n")
    with open(written["config"], "w") as f:
        f.write('embeddings {\n  tensor_name: "embeddings"\n'
                f"  tensor_shape: {len(keep)}\n  tensor_shape: {embeddings.shape[1]}\n"
                '  tensor_path: "vectors.tsv"\n  metadata_path: "metadata.tsv"\n'
                + sprite_lines + "}\n")
    return written


def _tsv_field(value):
    return str(value).replace("\t", " ").replace("\n", " ")


def _as_rgb_uint8(images):
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.dtype != np.uint8:
        images = np.clip(np.round(images.astype(np.float32) * 255), 0, 255).astype(np.uint8)
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    return images[..., :3]


def _thumbnails_from_images(images, size):
    import tensorflow as tf

    rgb = _as_rgb_uint8(images)
    return tf.cast(tf.round(tf.image.resize(rgb, (size, size), antialias=True)),
                   tf.uint8).numpy()


def _thumbnails_from_paths(paths, size):
    import tensorflow as tf

    from keras_dml.data import decode_image

    thumbs = []
    for path in paths:
        image = decode_image(tf.io.read_file(path), channels=3)
        thumbs.append(tf.image.resize(image, (size, size), antialias=True))
    return tf.cast(tf.round(tf.stack(thumbs)), tf.uint8).numpy()


def _write_sprite(path, thumbs, side):
    import tensorflow as tf

    if thumbs.shape[1] != side:
        thumbs = tf.cast(tf.round(tf.image.resize(thumbs, (side, side), antialias=True)),
                         tf.uint8).numpy()
    grid = math.ceil(math.sqrt(len(thumbs)))
    sprite = np.full((grid * side, grid * side, 3), 255, np.uint8)  # white where empty
    for i, thumb in enumerate(thumbs):
        row, column = divmod(i, grid)
        sprite[row * side:(row + 1) * side, column * side:(column + 1) * side] = thumb
    tf.io.write_file(path, tf.io.encode_png(sprite))
