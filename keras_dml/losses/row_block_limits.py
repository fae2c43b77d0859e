"""The sizes that decide when and how a pair loss runs in row blocks.

Read by `keras_dml.losses.row_blocks` and its TensorFlow form
`keras_dml.losses.row_blocks_tensorflow`.
"""

from keras_dml.backend import primitives

__all__ = ["BLOCK_ENTRIES", "MIN_BLOCKS", "ROW_BLOCKS_ABOVE_ENTRIES", "STORED_WEIGHTS_MAX_ENTRIES",
           "XLA_BLOCKS_FROM_ENTRIES", "more_entries"]

#: (N, M) matrices with more entries are computed in row blocks (2,048^2: 16 MB)
ROW_BLOCKS_ABOVE_ENTRIES = 2048 * 2048
#: up to this many entries (4 GB) the forward pass keeps each block's weights for the
#: backward pass (one N x M float32 in all); beyond, the backward pass computes them again
STORED_WEIGHTS_MAX_ENTRIES = 2 ** 30
#: the entries of one block, (rows, M), at most
BLOCK_ENTRIES = 2048 * 2048
#: and at least this many blocks, so that one block's temporaries stay a small part of
#: the peak just above `ROW_BLOCKS_ABOVE_ENTRIES`
MIN_BLOCKS = 8
#: from this many matrix entries on, a loss that runs its terms under XLA does so on each
#: block, where XLA is faster; below, TensorFlow's kernels, as XLA's compiled code and
#: cluster temporaries add a fixed memory cost that weighs most on smaller batches
#: (benchmarks/README.md, "Large batches")
XLA_BLOCKS_FROM_ENTRIES = 8192 * 8192


def more_entries(queries, keys, limit):
    """N x M > limit: a Python bool for static shapes, else a boolean tensor."""
    return primitives.num_rows(queries) * primitives.num_rows(keys) > limit
