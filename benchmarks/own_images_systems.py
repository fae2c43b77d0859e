"""keras_dml's own-images road as `benchmarks.worker` units, on the worker's Keras backend.

The worker imports these through `benchmarks.on_tensorflow`, `on_jax` or `on_torch`,
which set KERAS_BACKEND first. The photos are a folder `root/train/<class>/<image>` and
`root/test/<class>/<image>` (`benchmarks.torchvision_baseline.photo_folder`), the split
`keras-dml train --data-dir root` takes as given.

- `own_images_train`: `steps` steps of `keras-dml train --data-dir root --image-size N`'s
  model and training stream (`profile_own_images.own_images_job`: cnn3, C x k, the
  file stream this backend trains on), one `fit` per unit as the run calls it: the
  stream's start and `fit`'s own are in the figure, the first call's compilation is not.
- `own_images_embed`: the test photos embedded as `keras-dml embed` and `index` embed
  them (`keras_dml.inference.embed` of the files, batches of 64, the run's evaluation
  transform), one pass per unit.

Facts: the network's trainable parameter count and the transform, which
`torchvision_baseline` checks against the PyTorch twin's.
"""

import os

import keras
import numpy as np

from benchmarks.profile_own_images import own_images_job

__all__ = ["own_images_embed", "own_images_train"]


def _facts(job):
    model, preprocessing = job.model, job.preprocessing
    return {"backend": keras.backend.backend(), "backbone": job.config.backbone,
            "trainable_parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
            "embedding_dim": job.config.embedding_dim,
            "transform": {"resize": preprocessing.resize_size, "crop": preprocessing.image_size,
                          "normalization": preprocessing.normalization}}


def own_images_train(data_dir, image_size=64, steps=20, classes_per_batch=None,
                     samples_per_class=None, loss="MultiSimilarity", backbone="cnn3"):
    """`steps` training steps of the own-images run on `data_dir`'s train photos.

    `loss`: the run's loss by name (MultiSimilarity with its VTHM miner: the PyTorch
    twin's pair); C and k: `keras-dml train`'s defaults unless given."""
    job = own_images_job(os.fspath(data_dir), image_size, classes_per_batch=classes_per_batch,
                         samples_per_class=samples_per_class, loss=loss, backbone=backbone,
                         weights="none")

    def step():
        history = job.model.fit(job.stream, epochs=1, steps_per_epoch=steps, verbose=0,
                                shuffle=False)
        return float(history.history["loss"][-1])

    value = step()
    return step, {**_facts(job), "loss": value, "steps": steps,
                  "batch": [job.config.classes_per_batch, job.config.samples_per_class],
                  "images_per_unit": steps * job.config.classes_per_batch
                  * job.config.samples_per_class}


def own_images_embed(data_dir, image_size=64, batch_size=64, classes_per_batch=None,
                     samples_per_class=None, backbone="cnn3"):
    """One embedding pass over `data_dir`'s test photos by the run's embedder (the run
    built with C x k as given: a folder of few classes needs a smaller C)."""
    from keras_dml.inference import embed

    job = own_images_job(os.fspath(data_dir), image_size, classes_per_batch=classes_per_batch,
                         samples_per_class=samples_per_class, backbone=backbone,
                         weights="none")
    paths = [str(p) for p in job.splits.test.paths]
    embedder = job.model.embedder()

    def step():
        return embed(embedder, paths, batch_size, preprocessing=job.preprocessing).embeddings

    embeddings = step()
    return step, {**_facts(job), "images_per_unit": len(embeddings),
                  "embedding_shape": list(embeddings.shape)}
