"""Inference: a model's embeddings of any data, by one loop.

`embed(model, data)` embeds every item of any accepted form (arrays, image files,
splits, finite streams) and returns an `Embedded` (embeddings, labels, positions,
paths, skipped files); `embed_chunks` does the same in bounded chunks, for
streaming into a store. Both run the one loop of `keras_dml.inference.loop`, with
its one progress line (`Progress`), its label rule and its bad-image rule (stop at
an unreadable image file, naming it, unless `skip_bad_images=True`, which leaves
each one out, names it and lists it).

Everything in keras_dml that embeds (evaluation, callbacks, the index, the command
line, the retriever export's gallery) runs this loop.
"""

from keras_dml.inference.batches import ArrayBatches, Batches, as_dataset, finite_batches, \
    finite_dataset
from keras_dml.inference.entry import EMBEDDABLE, LABELLED, embed, embed_chunks
from keras_dml.inference.loop import Embedded, embed_finite, inference_function
from keras_dml.inference.progress import Progress

__all__ = [
    "EMBEDDABLE",
    "LABELLED",
    "ArrayBatches",
    "Batches",
    "Embedded",
    "Progress",
    "as_dataset",
    "embed",
    "embed_chunks",
    "embed_finite",
    "finite_batches",
    "finite_dataset",
    "inference_function",
]
