"""Hard negative class mining for N-pair-mc batches (Sohn, 2016).

A batch starts from the next class of a class-balanced order (every class once
per epoch over classes) and grows greedily: the next class is the one whose
representative embedding is closest to any class already chosen, i.e. the
negative class that violates the triplet constraint the most for the
anchors in the batch. Representatives come from the current model and are
refreshed every `refresh_every` training steps by
`HardNegativeClassMining`; batches already prefetched by tf.data (a few)
still use the previous representatives.

Reference: Sohn, "Improved Deep Metric Learning with Multi-class N-pair Loss
Objective" (NIPS 2016), negative class mining; the weighted contrastive
paper, section 2.3.
"""

import keras
import numpy as np

from keras_dml import backend
from keras_dml import hyperparameters, ops
from keras_dml.data.pipeline import batches_from_sampler
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import make_source

__all__ = ["HardNegativeClassMining", "HardNegativeClassSampler", "hard_negative_class_batches"]

tf = backend.require_tensorflow("keras_dml.data.hard_negative_class_batches (tf.data)")


class HardNegativeClassSampler(ClassBalancedSampler):
    """C classes mined greedily from class representatives, k samples each.

    Until `update` is called, batches are those of `ClassBalancedSampler`.

    Args:
        labels: Integer label per sample, `(N,)`.
        classes_per_batch: C.
        samples_per_class: k. Defaults to 2 (N-pair-mc).
        num_neighbors: Nearest classes kept per class at each `update`
            (candidates for the greedy step). Defaults to `None`:
            `min(num_classes - 1, 4 * C)`.
        small_classes: As for `ClassBalancedSampler`. Defaults to `"replace"`.
        seed: NumPy seed. Defaults to `None`.

    Examples:

    >>> sampler = HardNegativeClassSampler(labels, classes_per_batch=32)
    >>> sampler.update(class_embeddings)  # (num_classes, d), row = class index  # doctest: +SKIP
    >>> batch = sampler.next_batch()  # doctest: +SKIP
    """

    def __init__(self, labels, classes_per_batch, samples_per_class=2, num_neighbors=None,
                 small_classes="replace", seed=None):
        super().__init__(labels, classes_per_batch, samples_per_class,
                         small_classes=small_classes, seed=seed)
        if num_neighbors is None:
            num_neighbors = 4 * self.classes_per_batch
        num_neighbors = hyperparameters.integer_at_least("num_neighbors", num_neighbors, 1)
        total = len(self.counts)
        self.num_neighbors = min(total - 1, num_neighbors)
        self._usable = np.zeros(total, bool)
        self._usable[self.usable_classes] = True
        self._neighbors = None
        self.num_updates = 0
        self._rng = np.random.default_rng(seed)
        self._mined_batches = 0
        self._appearances = np.zeros(total, np.int64)

    def update(self, class_embeddings, chunk_size=2048):
        """Recomputes each class's nearest classes from its representative.

        Args:
            class_embeddings: `(num_classes, d)`, row `c` the representative
                of class index `c` (`class_values[c]`); L2-normalised here.
            chunk_size: Rows per similarity block (memory `chunk_size x L`).
                Defaults to 2048.
        """
        reps = np.asarray(class_embeddings, np.float32)
        if reps.ndim != 2 or len(reps) != len(self.counts):
            raise ValueError(
                f"class_embeddings must have shape ({len(self.counts)}, d); got "
                f"{reps.shape}.")
        if not np.isfinite(reps).all():
            raise ValueError("class_embeddings contain NaN or inf.")
        reps = ops.unit_rows(reps)
        k = self.num_neighbors
        index = np.empty((len(reps), k), np.int64)
        score = np.empty((len(reps), k), np.float32)
        for start in range(0, len(reps), chunk_size):
            sim = reps[start:start + chunk_size] @ reps.T
            rows = np.arange(sim.shape[0])
            sim[rows, start + rows] = -np.inf
            sim[:, ~self._usable] = -np.inf
            top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
            index[start:start + chunk_size] = top
            score[start:start + chunk_size] = np.take_along_axis(sim, top, axis=1)
        self._neighbors = (index, score)  # one assignment: safe for the reader thread
        self.num_updates += 1

    def next_batch(self):
        """The next batch: mined once `update` was called, else class-balanced.

        A mined batch starts from the next class of the class-balanced order
        (every class starts a batch once per epoch over classes) and its
        classes draw their samples in passes as `ClassBalancedSampler` does.
        """
        if self._neighbors is None:
            return super().next_batch()
        classes = self._mined_classes()
        out = self.numpy_samples_of(classes, self._appearances[classes])
        self._appearances[classes] += 1
        return out

    def _mined_classes(self):
        index, score = self._neighbors
        epoch, position = divmod(self._mined_batches, self.num_classes)
        self._mined_batches += 1
        first = int(self.numpy_classes_at(epoch, [position])[0])
        chosen = [first]
        best = np.full(len(self.counts), -np.inf, np.float32)
        taken = np.zeros(len(self.counts), bool)
        taken[first] = True
        while len(chosen) < self.classes_per_batch:
            last = chosen[-1]
            np.maximum.at(best, index[last], score[last])
            best[taken] = -np.inf
            nxt = int(np.argmax(best))
            if not np.isfinite(best[nxt]):  # no mined candidate left: a random one
                free = np.flatnonzero(self._usable & ~taken)
                nxt = int(self._rng.choice(free))
            chosen.append(nxt)
            taken[nxt] = True
        return np.asarray(chosen, np.int64)


@hyperparameters.renamed_keywords(source="data")
def hard_negative_class_batches(data, classes_per_batch, samples_per_class=2, *,
                                num_neighbors=None, small_classes="replace", seed=None,
                                preprocessing=None, training=True, map_fn=None):
    """N-pair-mc batches with hard negative class mining.

    Args:
        data: As for `class_balanced_batches`. `source=` is its deprecated name.
        classes_per_batch: C.
        samples_per_class: k. Defaults to 2.
        num_neighbors: See `HardNegativeClassSampler`. Defaults to `None`.
        small_classes: As for `class_balanced_batches`. Defaults to `"replace"`.
        seed: Seed of the index stream and augmentation. Defaults to `None`.
        preprocessing: As for `class_balanced_batches`.
        training: As for `class_balanced_batches`. Defaults to True.
        map_fn: As for `class_balanced_batches`.

    Returns:
        `(dataset, sampler)`: the infinite `tf.data.Dataset` and the
        `HardNegativeClassSampler` it reads (one shared sampler, so that
        `sampler.update` or a `HardNegativeClassMining` callback steers it).
    """
    source = make_source(as_data(data, SAMPLES, "data"), preprocessing=preprocessing,
                         training=training)
    sampler = HardNegativeClassSampler(source.labels, classes_per_batch, samples_per_class,
                                       num_neighbors, small_classes, seed)
    dataset = batches_from_sampler(source, lambda: sampler, sampler.batch_size, seed=seed,
                                   replayable=False,
                                   map_fn=map_fn, chunk=1)
    return dataset, sampler


class HardNegativeClassMining(keras.callbacks.Callback):
    """Refreshes a `HardNegativeClassSampler` from the model being trained.

    Every `refresh_every` training steps (and at the start of training), one
    random image per class (or the mean of `images_per_class`) is embedded
    with the model in inference mode, after `preprocessing.eval` for file
    sources, and `sampler.update` is called with these representatives.

    Args:
        sampler: The `HardNegativeClassSampler` of the training dataset.
        data: The same data the dataset was built from. `source=` is its
            deprecated name.
        refresh_every: Steps between refreshes. Defaults to 500.
        images_per_class: Images averaged into a representative. Defaults to 1
            (Sohn: one example per class).
        preprocessing: Evaluation preprocessing for file sources. Defaults to
            `None` (`Preprocessing()` for files, none for arrays).
        batch_size: Inference batch size. Defaults to 256.
        seed: Seed of the representative choice. Defaults to `None`.
    """

    @hyperparameters.renamed_keywords(source="data")
    def __init__(self, sampler, data, refresh_every=500, images_per_class=1,
                 preprocessing=None, batch_size=256, seed=None):
        super().__init__()
        if refresh_every < 1 or images_per_class < 1:
            raise ValueError(
                f"refresh_every and images_per_class must be positive; got "
                f"{refresh_every} and {images_per_class}.")
        self.sampler = sampler
        self.refresh_every = int(refresh_every)
        self.images_per_class = int(images_per_class)
        self.batch_size = int(batch_size)
        self._source = make_source(as_data(data, SAMPLES, "data"),
                                   preprocessing=preprocessing, training=False)
        self._rng = np.random.default_rng(seed)
        self._fetch = tf.function(lambda idx: self._source.fetch(idx, None)[0])
        self._steps = 0

    def class_representatives(self):
        """`(num_classes, d)` mean embedding of a few random images per class."""
        s = self.sampler
        picks = self._rng.random((len(s.counts), self.images_per_class))
        positions = s.offsets[:, None] + (picks * s.counts[:, None]).astype(np.int64)
        indices = s.members[positions].reshape(-1)
        embeddings = []
        for start in range(0, len(indices), self.batch_size):
            x = self._fetch(tf.constant(indices[start:start + self.batch_size]))
            embeddings.append(keras.ops.convert_to_numpy(self.model(x, training=False)))
        embeddings = np.concatenate(embeddings).reshape(len(s.counts),
                                                        self.images_per_class, -1)
        return embeddings.mean(axis=1)

    def refresh(self):
        """Embeds the representatives now and updates the sampler."""
        self.sampler.update(self.class_representatives())

    def on_train_begin(self, logs=None):
        self.refresh()

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        if self._steps % self.refresh_every == 0:
            self.refresh()
