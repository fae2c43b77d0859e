"""keras_dml's systems on Keras' TensorFlow backend, for the worker: the loss step of
`benchmarks.tf_systems` (a `tf.function`, TensorFlow's thread count set), the main job's
`fit` steps and the kNN search of `benchmarks.keras_systems`, and the own-images road
of `benchmarks.own_images_systems`."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"

from benchmarks.tf_systems import loss_step  # noqa: E402
from benchmarks.keras_systems import main_job_step, nearest_neighbors  # noqa: E402
from benchmarks.own_images_systems import own_images_embed, own_images_train  # noqa: E402

__all__ = ["loss_step", "main_job_step", "nearest_neighbors", "own_images_embed",
           "own_images_train"]
