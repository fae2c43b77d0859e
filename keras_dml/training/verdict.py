"""Whether a run means something: refused before any work when it cannot, judged
after training against a random ranking."""

import warnings

import numpy as np

from keras_dml import backbones
from keras_dml.training.config import OWN_DATASETS
from keras_dml.training.inputs import evaluation_splits

__all__ = ["chance_recall", "check_meaningful", "fit_batch_design", "run_verdict"]


def fit_batch_design(config, splits):
    """Lowers the default classes per batch to the training classes there are (at least
    2), saying so in one warning: a catalogue of few classes trains with batches of all
    of them. A C that was given (`classes_per_batch`) is left as it is.

    Returns:
        The warning's text, or None when nothing changed.
    """
    classes, wanted = splits.train.num_classes, config.classes_per_batch
    if (classes >= wanted or classes < 2
            or not getattr(config, "_default_classes_per_batch", False)):
        return None
    config.classes_per_batch = classes
    message = (f"{classes} training classes, fewer than the default {wanted} a batch: each "
               f"batch holds all {classes} classes x {config.samples_per_class} images "
               f"(--classes-per-batch {classes}).")
    warnings.warn(message, stacklevel=2)
    return message


def check_meaningful(config, splits):
    """Refuses, before any work, a run whose results would mean nothing.

    A Keras Applications backbone from random weights (its BatchNorm moving averages
    lag the weights for thousands of steps, and retrieval falls to chance, also with
    `freeze_bn`); a test split of one class (every neighbour is right: Recall@K is 1;
    a run without evaluation, `config.evaluates` False, has no test split);
    fewer training classes than a batch holds (named in the flags that fix it).

    Raises:
        ValueError: naming the setting that makes the run meaningless and its fix.
    """
    if backbones.is_application(config.backbone) and config.weights == "none":
        raise ValueError(
            f"backbone={config.backbone} with weights=none: a Keras Applications network "
            "from random weights collapses to chance-level retrieval at CPU budgets (its "
            "BatchNorm statistics lag the weights for thousands of steps). Start it from "
            "weights=imagenet (Keras' download or ~/.keras/models), a .weights.h5 file or an "
            "earlier run folder, or train backbone=cnn3 or convnet from scratch.")
    test = evaluation_splits(splits)[0]
    own = config.dataset in OWN_DATASETS
    if config.evaluates and test.num_classes < 2:
        fix = (f" give test_dir images of at least 2 classes (it has {test.num_classes})"
               if config.test_dir is not None else
               " hold out at least 2 classes (test_classes=2 or a larger fraction)" if own
               else " use a dataset whose test split has several classes")
        raise ValueError(f"The test split has {test.num_classes} class: every retrieved image "
                         f"is of the query's class, so Recall@K would read 100 and mean "
                         f"nothing;{fix}.")
    if splits.train.num_classes < config.classes_per_batch:
        fix = ("hold out fewer classes (test_classes) or lower classes_per_batch" if own
               else "lower classes_per_batch")
        raise ValueError(
            f"{splits.train.num_classes} training class(es) (of "
            f"{splits.train.num_classes + test.num_classes}) are fewer than "
            f"classes_per_batch={config.classes_per_batch}: {fix}.")


def chance_recall(queries, references=None):
    """Recall@1 of a random ranking: the chance that a random reference (another query
    of the set, leave-one-out, or an item of `references`) shares the query's class."""
    labels = np.asarray(queries.labels)
    if references is None:
        _, counts = np.unique(labels, return_counts=True)
        return float(np.sum(counts * (counts - 1)) / max(len(labels) * (len(labels) - 1), 1))
    gallery = np.asarray(references.labels)
    return float(np.mean([np.mean(gallery == label) for label in labels]))


def run_verdict(before, after, chance):
    """Why the trained model's Recall means nothing (a sentence), or "" when it is fine:
    Recall@1 at chance (within 1.5 times the random ranking's) or below where it started."""
    start, end = before["recall@1"], after["recall@1"]
    if end <= 1.5 * chance:
        return (f"Recall@1 {100 * end:.1f} is at chance (a random ranking scores "
                f"{100 * chance:.1f}): the model learned nothing usable")
    if end < start:
        return (f"Recall@1 fell from {100 * start:.1f} to {100 * end:.1f} in training: the "
                "model is worse than untrained")
    return ""
