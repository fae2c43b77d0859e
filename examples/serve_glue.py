"""Visual search with your own stack: a keras_dml export and a Milvus collection, no keras_dml.

The exported SavedModel takes encoded image bytes and returns unit embeddings; the
collection `keras-dml index --uri` wrote holds the catalogue's vectors with their id,
label and metadata (see docs/guide/index_and_verification.md for its schema). One
request at a time:

    python examples/serve_glue.py SAVEDMODEL_DIR MILVUS_URI COLLECTION photo.jpg [--k 5]
"""

import argparse

import tensorflow as tf
from pymilvus import MilvusClient

__all__ = ["Glue"]


class Glue:
    """Embeds an image with the export and asks the collection for its nearest items."""

    def __init__(self, savedmodel_dir, uri, collection):
        self.embed = tf.saved_model.load(savedmodel_dir).signatures["serving_default"]
        self.client = MilvusClient(uri)
        self.client.load_collection(collection)  # keras-dml leaves it released
        self.collection = collection

    def search(self, image_bytes, k=5):
        """The k nearest items as (id, label, similarity, metadata), best first."""
        vector = self.embed(image_bytes=tf.constant([image_bytes]))["embedding"][0]
        [hits] = self.client.search(self.collection, data=[vector.numpy().tolist()], limit=k,
                                    anns_field="vector", output_fields=["label", "metadata"])
        return [(hit["id"], hit["entity"]["label"], hit["distance"], hit["entity"]["metadata"])
                for hit in hits]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("savedmodel_dir", "uri", "collection", "image"):
        parser.add_argument(name)
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    glue = Glue(args.savedmodel_dir, args.uri, args.collection)
    with open(args.image, "rb") as f:
        for rank, (id_, label, similarity, _) in enumerate(glue.search(f.read(), args.k), 1):
            print(f"{rank}. {id_}  label {label}  similarity {similarity:.4f}")
