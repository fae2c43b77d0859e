"""An `Index` on disk: a directory of NumPy `.npy` arrays and JSON, read without pickle.

    index.json        format, metric, backend and its options, next id, info,
                      provenance (model fingerprint, preprocessing, ...), size, dim
    embeddings.npy    float32 (N, d)
    ids.npy           int64 (N,) or unicode (N,)
    labels.npy        int64 (N,) or unicode (N,)
    metadata.json     a list of N JSON values (null where none was given)
    added.npy         float64 (N,): when each item was added, seconds since the
                      epoch (absent in indexes saved before it was recorded: 0)
"""

import json
import os
import shutil
import uuid

import numpy as np

__all__ = ["CONFIG", "EMPTY", "check_info", "check_metadata", "exceeds", "kind_dtype", "kind_of",
           "load", "save", "unknown"]

FORMAT = "keras_dml.index/1"
CONFIG = "index.json"
EMPTY = "The index is empty: add embeddings before searching."


def exceeds(k, size):
    """The error message of a search asking more items than the index holds."""
    return f"k={k} exceeds the {size} items in the index."


def unknown(kind):
    """The id or label that stands for none in an index of `kind` ("int" or "str"):
    -1, or "" for strings."""
    return "" if kind == "str" else -1


def kind_dtype(kind):
    """The NumPy dtype of ids or labels of `kind`."""
    return str if kind == "str" else np.int64


def kind_of(array):
    """"str" for a unicode array, else "int"."""
    return "str" if array.dtype.kind == "U" else "int"


def check_metadata(metadata, n):
    """`metadata` as a list of n JSON values (None -> n Nones)."""
    if metadata is None:
        return [None] * n
    if not isinstance(metadata, (list, tuple)) or len(metadata) != n:
        raise ValueError(f"metadata must be a list of {n} values, one per embedding, got "
                         f"{type(metadata).__name__} of length "
                         f"{len(metadata) if hasattr(metadata, '__len__') else '?'}.")
    try:
        return json.loads(json.dumps(list(metadata)))
    except (TypeError, ValueError) as error:
        raise ValueError(f"metadata must be JSON-serialisable: {error}.") from None


def check_info(info):
    """`info` as a JSON dict (None -> {})."""
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise ValueError(f"info must be a dict, got {type(info).__name__}.")
    try:
        return json.loads(json.dumps(info))
    except (TypeError, ValueError) as error:
        raise ValueError(f"info must be JSON-serialisable: {error}.") from None


def save(path, config, embeddings, ids, labels, metadata, added, overwrite=False):
    """Writes the index directory atomically (staging directory, then rename)."""
    path = os.fspath(path)
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True to replace it.")
        if not os.path.isfile(os.path.join(path, CONFIG)):
            raise FileExistsError(f"{path} exists and is not a saved index; not replacing it.")
    staging = f"{path.rstrip(os.sep)}.saving-{uuid.uuid4().hex[:8]}"
    os.makedirs(staging)
    try:
        count = 0 if ids is None else len(ids)
        dim = None if embeddings is None else int(embeddings.shape[1])
        if count:
            np.save(os.path.join(staging, "embeddings.npy"), embeddings)
            np.save(os.path.join(staging, "ids.npy"), ids)
            np.save(os.path.join(staging, "labels.npy"), labels)
            np.save(os.path.join(staging, "added.npy"), added)
            with open(os.path.join(staging, "metadata.json"), "w") as f:
                json.dump(metadata, f)
        with open(os.path.join(staging, CONFIG), "w") as f:
            json.dump({"format": FORMAT, **config, "size": count, "dim": dim}, f, indent=2)
            f.write("\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if os.path.exists(path):
        retired = f"{staging}.old"
        os.rename(path, retired)
        os.rename(staging, path)
        shutil.rmtree(retired)
    else:
        os.rename(staging, path)


def load(path):
    """`(config, embeddings, ids, labels, metadata, added)`; arrays are None for an
    empty index."""
    path = os.fspath(path)
    config_path = os.path.join(path, CONFIG)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{config_path} does not exist: not a saved keras_dml index.")
    with open(config_path) as f:
        config = json.load(f)
    if config.get("format") != FORMAT:
        raise ValueError(f"{config_path} has format {config.get('format')!r}, expected {FORMAT!r}.")
    if not config["size"]:
        return config, None, None, None, None, None

    def array(name):
        return np.load(os.path.join(path, name), allow_pickle=False)

    embeddings, ids, labels = array("embeddings.npy"), array("ids.npy"), array("labels.npy")
    with open(os.path.join(path, "metadata.json")) as f:
        metadata = json.load(f)
    added_path = os.path.join(path, "added.npy")
    added = array("added.npy") if os.path.isfile(added_path) else np.zeros(len(ids))
    sizes = {len(embeddings), len(ids), len(labels), len(metadata), len(added)}
    if sizes != {config["size"]} or embeddings.shape[1] != config["dim"]:
        raise ValueError(f"{path} is inconsistent: {CONFIG} says {config['size']} x "
                         f"{config['dim']}, the arrays hold {sorted(sizes)} rows of "
                         f"dimension {embeddings.shape[1]}.")
    return config, embeddings, ids, labels, metadata, added
