"""The collections of a Milvus database and their aliases: listed, dropped, aliased.

A catalogue switches to a retrained model without a pause: the new model's
embeddings go into a new collection while the old one serves under an alias,
the alias moves to the new collection in one step (Milvus' `alter_alias`),
and the old collection is dropped. `Collections` does each step on a Milvus
Lite file or a server URI (`keras-dml collections` runs it from the command
line), and refuses what would lose data by surprise: dropping a collection an
alias still points to, one keras_dml did not make, or an alias in place of a
collection (Milvus would drop the collection behind it).

`Index`, `Index.open` and `keras-dml index` / `search` take an alias wherever
they take a collection name: they read, search and write the collection it
points to when they open it, and stay on that collection (whose model they
hold) when the alias moves; a long-running service reopens it after the
switch, with the new model.
"""

import dataclasses
import datetime
import os

from keras_dml.index.milvus import (
    CREATED,
    TIMEOUT,
    call,
    check_database,
    connect,
    parse_record,
    release,
)

__all__ = ["Collection", "Collections"]


@dataclasses.dataclass(frozen=True)
class Collection:
    """What `Collections.describe` tells about one collection.

    Attributes:
        name: The collection's name.
        aliases: The aliases pointing to it, sorted.
        keras_dml: Whether keras_dml made it (it holds a keras_dml record).
        model_fingerprint: The fingerprint of the model that made its
            embeddings (None: unknown, or not a keras_dml collection).
        run: The run directory of that model (None where unknown).
        count: Its live items (None for a collection keras_dml did not make).
        created: When it was created, seconds since the epoch (None: unknown).
    """

    name: str
    aliases: tuple
    keras_dml: bool
    model_fingerprint: str = None
    run: str = None
    count: int = None
    created: float = None

    def to_dict(self):
        """A JSON dict; `created` as an ISO 8601 UTC time (or None)."""
        return {**dataclasses.asdict(self), "aliases": list(self.aliases),
                "created": created_text(self.created, "T") if self.created else None}


def created_text(seconds, separator=" "):
    """Seconds since the epoch as `2026-01-31 12:00:00Z` (UTC, to the second)."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(separator, timespec="seconds").replace("+00:00", "Z")


class Collections:
    """The collections and aliases at a Milvus URI: a Lite file or a server.

    Args:
        uri: A Milvus Lite database (a path ending in `.db`, which must exist)
            or an `http(s)://` server URI.
        token: The server's token. Defaults to None.
        timeout: Seconds to reach a server. Defaults to 10.

    Raises:
        FileNotFoundError: No Lite database at `uri`.
        ConnectionError: The server cannot be reached.
        RuntimeError: Another process holds the Lite file.

    Examples:

    >>> with Collections("catalogue.db") as collections:  # doctest: +SKIP
    ...     collections.alias("shop", "shop_v2")  # returns the previous target
    'shop_v1'
    """

    def __init__(self, uri, token=None, timeout=TIMEOUT):
        self.uri = os.fspath(uri)
        check_database(self.uri)
        self._client = connect(self.uri, token, timeout)

    def close(self):
        if self._client is not None:
            release(self._client, self.uri)
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _call(self, name, method, *args, **kwargs):
        if self._client is None:
            raise RuntimeError(f"The connection to {self.uri} is closed.")
        return call(getattr(self._client, method), self.uri, name, *args, **kwargs)

    # -- reading -------------------------------------------------------------------------

    def names(self):
        """The collections' names, sorted (aliases are not collections)."""
        return sorted(self._call(None, "list_collections"))

    def aliases(self):
        """`{alias: collection}` for every alias."""
        return {alias: self._call(alias, "describe_alias", alias)["collection_name"]
                for alias in self._call(None, "list_aliases")["aliases"]}

    def target(self, name):
        """The collection `name` stands for: itself, or the one the alias `name` points
        to; None when it is neither."""
        if name in self.names():
            return name
        return self.aliases().get(name)

    def describe(self, name):
        """The `Collection` called `name` (not an alias).

        Raises:
            ValueError: `name` is an alias or no collection (naming those there).
        """
        self._require_collection(name)
        aliases = tuple(sorted(self._call(name, "list_aliases", name)["aliases"]))
        description = self._call(name, "describe_collection", name)
        properties = description.get("properties", {})
        created = _created(properties, description)
        record = parse_record(properties, name, self.uri)
        if record is None:
            return Collection(name, aliases, False, created=created)
        self._call(name, "load_collection", name)  # a server counts loaded collections only
        rows = self._call(name, "query", name, filter="", output_fields=["count(*)"])
        made = record.get("provenance") or {}
        return Collection(name, aliases, True, made.get("model_fingerprint"), made.get("run"),
                          int(rows[0]["count(*)"]), created)

    def list(self):
        """A `Collection` per collection, sorted by name."""
        return [self.describe(name) for name in self.names()]

    def _require_collection(self, name, what="collection"):
        names = self.names()
        if name in names:
            return
        target = self.aliases().get(name)
        if target is not None:
            raise ValueError(f"{name!r} at {self.uri} is an alias of collection {target!r}, "
                             f"not a {what}: give the collection's name.")
        raise ValueError(f"{self.uri} has no collection {name!r}; it has "
                         f"{names or 'none'}.")

    # -- changing ------------------------------------------------------------------------

    def drop(self, name, with_aliases=False):
        """Drops the keras_dml collection `name` and its items for good; returns its
        `Collection` as it was.

        Args:
            name: A collection's name (not an alias).
            with_aliases: Also remove the aliases pointing to it. Defaults to
                False: a collection an alias points to is refused.

        Raises:
            ValueError: `name` is unknown or an alias, keras_dml did not make
                the collection, or an alias points to it.
        """
        dropped = self.describe(name)
        if not dropped.keras_dml:
            raise ValueError(f"Collection {name!r} at {self.uri} was not made by keras_dml "
                             "(it has no keras_dml record): keras_dml drops only its own "
                             "collections.")
        if dropped.aliases and not with_aliases:
            names = ", ".join(repr(alias) for alias in dropped.aliases)
            raise ValueError(f"Collection {name!r} at {self.uri} is what alias {names} "
                             "points to: move the alias to another collection first, or "
                             "pass with_aliases=True to remove it as well.")
        for alias in dropped.aliases:
            self._call(alias, "drop_alias", alias)
        self._call(name, "drop_collection", name)
        return dropped

    def alias(self, alias, name):
        """Points `alias` to the collection `name` in one step: creates the alias, or
        moves it (searches through it then answer from `name`). Returns the
        collection it pointed to before (None for a new alias).

        Raises:
            ValueError: `name` is no collection (or an alias), or `alias` is a
                collection's name.
        """
        self._require_collection(name)
        if alias in self.names():
            raise ValueError(f"{alias!r} at {self.uri} is a collection, so it cannot be an "
                             "alias: choose another alias name.")
        before = self.aliases().get(alias)
        if before is None:
            self._call(alias, "create_alias", name, alias)
        elif before != name:
            self._call(alias, "alter_alias", name, alias)
        return before

    def unalias(self, alias):
        """Removes `alias` (its collection stays); returns the collection it pointed to.

        Raises:
            ValueError: `alias` is no alias.
        """
        target = self.aliases().get(alias)
        if target is None:
            what = "a collection, not an alias" if alias in self.names() else "no alias"
            raise ValueError(f"{alias!r} at {self.uri} is {what}.")
        self._call(alias, "drop_alias", alias)
        return target


def _created(properties, description):
    """When a collection was created: keras_dml's property, else a server's own time
    (a hybrid timestamp: milliseconds shifted left by 18 bits), else None."""
    if CREATED in properties:
        return float(properties[CREATED])
    stamp = description.get("created_timestamp")
    return (stamp >> 18) / 1000 if stamp else None
