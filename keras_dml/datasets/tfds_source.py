"""Getting the datasets through tensorflow_datasets (when they can be downloaded).

Images are exported once, still encoded, to `<cache>/<tfds name>/<split>/`,
so a tfds dataset becomes the same file-based `LabeledImages` as a local
folder: memory holds paths, not pixels.
"""

import os

import numpy as np

from keras_dml.datasets.layout import ENV_VAR, DatasetNotFoundError

__all__ = ["export_tfds_images", "from_tfds", "use_local"]

_EXTENSIONS = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG", "png"), (b"GIF8", "gif"),
               (b"BM", "bmp"))


def use_local(data_dir, source):
    """Whether to read the official folder layout rather than tfds."""
    if source == "local":
        return True
    if source == "tfds":
        return False
    return data_dir is not None or bool(os.environ.get(ENV_VAR))


def from_tfds(dataset, how_to_get, load_fn):
    """Runs `load_fn()`; any tfds failure becomes a `DatasetNotFoundError`."""
    try:
        return load_fn()
    except DatasetNotFoundError:
        raise
    except Exception as error:  # tfds raises many types when offline
        raise DatasetNotFoundError(
            f"{dataset}: tensorflow_datasets could not provide it "
            f"({type(error).__name__}: {str(error)[:300]}). {how_to_get}"
        ) from error


def export_tfds_images(tfds_name, label_key, splits, data_dir=None, cache_dir=None):
    """Writes each split's encoded images to files once; returns the manifest.

    Args:
        tfds_name: tfds builder name, e.g. `"caltech_birds2011"`.
        label_key: Feature holding the class id.
        splits: tfds split names.
        data_dir: tfds data_dir. Defaults to tfds' default.
        cache_dir: Where images are exported. Defaults to
            `<data_dir or ~/tensorflow_datasets>/keras_dml_images`.

    Returns:
        Dict `split -> (paths, labels)`.
    """
    import tensorflow_datasets as tfds

    base = data_dir or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
    root = os.path.join(cache_dir or os.path.join(base, "keras_dml_images"), tfds_name)
    manifest = os.path.join(root, "manifest.tsv")
    if not os.path.isfile(manifest):
        rows = []
        for split in splits:
            ds = tfds.load(tfds_name, split=split, data_dir=data_dir,
                           decoders={"image": tfds.decode.SkipDecoding()})
            os.makedirs(os.path.join(root, split), exist_ok=True)
            for i, example in enumerate(ds.as_numpy_iterator()):
                encoded = example["image"]
                ext = next((e for sig, e in _EXTENSIONS if encoded.startswith(sig)), "img")
                path = os.path.join(root, split, f"{i:06d}.{ext}")
                with open(path, "wb") as handle:
                    handle.write(encoded)
                rows.append(f"{split}\t{path}\t{int(example[label_key])}")
        with open(manifest + ".tmp", "w", encoding="utf-8") as handle:
            handle.write("\n".join(rows) + "\n")
        os.replace(manifest + ".tmp", manifest)
    result = {split: ([], []) for split in splits}
    with open(manifest, encoding="utf-8") as handle:
        for line in handle:
            split, path, label = line.rstrip("\n").split("\t")
            if split in result:
                result[split][0].append(path)
                result[split][1].append(int(label))
    return {k: (paths, np.asarray(labels, np.int64)) for k, (paths, labels) in result.items()}
