"""The running backend's `DMLModel` steps, and TensorFlow's data objects recognised
without importing TensorFlow (they exist only where it was imported)."""

import importlib
import sys

__all__ = ["backend_inputs", "is_tf_dataset", "steps"]


def steps():
    """`keras_dml.backend.<backend>.trainer`: the train step, test step (TensorFlow) and
    inference function of the running Keras backend."""
    from keras_dml import backend

    return importlib.import_module(f"keras_dml.backend.{backend.name()}.trainer")


def is_tf_dataset(data, distributed=True):
    """Whether `data` is a `tf.data.Dataset` or (with `distributed`) a
    `tf.distribute.DistributedDataset`."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return False
    kinds = (tf.data.Dataset, tf.distribute.DistributedDataset) if distributed else (
        tf.data.Dataset,)
    return isinstance(data, kinds)


def backend_inputs(x):
    """`x` (a tensor or a structure of them) with TensorFlow tensors as NumPy arrays, so a
    tf.data stream (of image files, say) feeds a model running on JAX or PyTorch; other
    values are returned as they are."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return x
    import keras

    return keras.tree.map_structure(
        lambda value: value.numpy() if isinstance(value, tf.Tensor) else value, x)
