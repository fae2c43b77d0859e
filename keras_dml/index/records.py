"""An index's record: what it holds (metric, options, kinds of ids and labels, metadata
fields, info, provenance), made new or read from an existing Milvus collection and
checked against what the caller gives."""

from keras_dml.index import provenance, storage

__all__ = ["check_provenance", "new_record", "open_collection"]


def new_record(metric, options, info, given):
    """The record of a new, empty index."""
    return {"metric": metric, "options": dict(options), "id_kind": None, "label_kind": None,
            "next_id": 0, "metadata_fields": [], "info": storage.check_info(info),
            "provenance": given}


def check_provenance(given, metric):
    """`given` provenance checked (`provenance.check`), its metric set to `metric`.

    Raises:
        ValueError: It records another metric.
    """
    given = provenance.check(given)
    if given["metric"] not in (None, metric):
        raise ValueError(f"provenance says metric {given['metric']!r} but metric={metric!r}.")
    given["metric"] = metric
    return given


def open_collection(store, metric, given_options, info, given, allow_mismatch):
    """The record of a `MilvusStore`'s collection, loaded and checked against what is
    given (metric, index options, dimension, model), or a new one.

    Raises:
        ValueError: Another metric, index type, build option or dimension.
        keras_dml.index.ModelMismatchError: Another model made its embeddings.
    """
    from keras_dml.index.milvus import check_index_options, search_options

    if not store.exists():
        index_type, options = check_index_options(given_options)
        return new_record(metric, {"index_type": index_type, **options}, info, given)
    record = store.read_record()
    where = f"Collection {store.collection!r} at {store.uri}"
    if record["metric"] != metric:
        raise ValueError(f"{where} holds {record['metric']} embeddings, not "
                         f"metric={metric!r}: open it with metric="
                         f"{record['metric']!r} (or Index.open).")
    recorded_type = record["options"]["index_type"]
    _, options = check_index_options({"index_type": recorded_type, **given_options})
    given_type = str(given_options.get("index_type", recorded_type)).upper()
    fixed = {k: v for k, v in options.items() if k in given_options
             and k not in search_options(recorded_type) and record["options"][k] != v}
    if given_type != recorded_type or fixed:
        raise ValueError(f"{where} has index options {record['options']}; got "
                         f"index_type={given_type!r} {fixed or ''}: an index is built with "
                         "its options when the collection is created.")
    record["options"].update({k: options[k] for k in search_options(recorded_type)
                              if k in given_options})
    recorded = record["provenance"]
    if given["dim"] is not None and recorded["dim"] not in (None, given["dim"]):
        raise ValueError(f"{where} holds embeddings of dimension {recorded['dim']}, not "
                         f"{given['dim']}.")
    provenance.compare_models(recorded, given, allow_mismatch, where)
    store.load()
    if info is not None:
        record["info"] = {**record["info"], **storage.check_info(info)}
    return record
