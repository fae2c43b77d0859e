"""An index's record: what it holds (metric, options, kinds of ids and labels, metadata
fields, info, provenance), made new or read from an existing Milvus collection and
checked against what the caller gives."""

from keras_dml.index import provenance, storage

__all__ = ["FIELD_TYPES", "check_metadata_fields", "check_provenance", "metadata_fields",
           "new_record", "open_collection"]

#: The type recorded for a metadata field, by the Python type of its JSON values
#: (JSON Schema's names; an "integer" field widens to "number" at its first decimal).
FIELD_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "object"}


def new_record(metric, options, info, given):
    """The record of a new, empty index."""
    return {"metric": metric, "options": dict(options), "id_kind": None, "label_kind": None,
            "next_id": 0, "metadata_fields": {}, "info": storage.check_info(info),
            "provenance": given}


def metadata_fields(record):
    """The record's metadata fields as `{name: type}` (type None while only nulls were
    seen; a record written before types were kept lists the names alone)."""
    fields = record.get("metadata_fields") or {}
    return dict.fromkeys(fields) if isinstance(fields, list) else dict(fields)


def check_metadata_fields(record, metadata, strict=True):
    """Checks dict metadata against the record's fields and records new ones.

    The fields are open until an item with dict metadata has keys: the keys of
    the items added then become the fields, each with the type of its first
    non-null value. From then on a key outside the fields, or a value of another
    type than its field's, is refused; a missing key or a null value is allowed
    (the item then has no value there, and a filter on that field passes it by).
    An "integer" field takes decimals and becomes "number"; a "number" field
    takes integers. Metadata that is not a dict (a path string, a list) has no
    fields and is not checked.

    Args:
        record: The index's record; its `metadata_fields` are updated.
        metadata: The JSON values of the items to add.
        strict: Refuse. Defaults to True; False records the fields of items
            saved before they were checked (`Index.load`): a new key joins the
            fields, a clashing value leaves its field's type as it is.

    Raises:
        ValueError: Naming the item, the key and the index's fields.
    """
    fields = metadata_fields(record)
    fixed = bool(fields)
    for item, value in enumerate(metadata):
        if not isinstance(value, dict):
            continue
        for key, field_value in value.items():
            if key not in fields and fixed and strict:
                raise ValueError(f"metadata of item {item}: {key!r} is not a field of this "
                                 f"index; its fields are {_describe(fields)} (a field left "
                                 "out of an item's metadata is stored as null).")
            known, given = fields.get(key), _field_type(field_value)
            if given is None or known == given or {known, given} == {"integer", "number"}:
                fields[key] = "number" if "number" in (known, given) else known or given
                continue
            if known is not None and strict:
                raise ValueError(f"metadata of item {item}: {key!r} = {field_value!r} is "
                                 f"{given} but the field holds {known}; the index's fields "
                                 f"are {_describe(fields)}.")
            fields[key] = known or given
    record["metadata_fields"] = fields


def _field_type(value):
    return None if value is None else FIELD_TYPES[type(value)]


def _describe(fields):
    return ", ".join(f"{name} ({kind or 'only nulls so far'})"
                     for name, kind in sorted(fields.items()))


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
    record["metadata_fields"] = metadata_fields(record)
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
