"""keras_dml's systems on Keras' PyTorch backend (`benchmarks.keras_systems`,
`benchmarks.own_images_systems`), for the worker."""

import os

os.environ["KERAS_BACKEND"] = "torch"

from benchmarks.keras_systems import loss_step, main_job_step, nearest_neighbors  # noqa: E402
from benchmarks.own_images_systems import own_images_embed, own_images_train  # noqa: E402

__all__ = ["loss_step", "main_job_step", "nearest_neighbors", "own_images_embed",
           "own_images_train"]
