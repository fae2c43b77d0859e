"""Subprocess side of the Milvus Lite tests: a second process on the same database file.

    python index_reopen_worker.py URI COLLECTION MODEL.keras QUERIES.npy GO_FLAG

Tries to open the collection while the test process holds the file (prints
"locked: <message>"), waits for GO_FLAG to exist (the test has closed it), then
reopens it, checks the model against the collection's record, searches QUERIES,
adds one item ("from-worker") and prints a JSON line: ids, scores, size, the
model's fingerprint and the collection's provenance.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_dml.index import Index, model_fingerprint  # noqa: E402


def main(uri, collection, model_path, queries_path, flag):
    try:
        Index.open(uri, collection).close()
        print("opened while held", flush=True)
    except RuntimeError as error:
        print(f"locked: {error}", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(flag):
        if time.monotonic() > deadline:
            sys.exit("the test never released the database")
        time.sleep(0.05)
    model = keras.models.load_model(model_path)
    queries = np.load(queries_path)
    with Index.open(uri, collection) as index:
        index.check_model(model)
        result = index.search(queries, k=3)
        size = len(index)
        index.add(-queries[:1], ids=["from-worker"], labels=["worker"])
        print(json.dumps({"ids": result.ids.tolist(), "scores": result.scores.tolist(),
                          "size": size, "fingerprint": model_fingerprint(model),
                          "provenance": index.provenance}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
