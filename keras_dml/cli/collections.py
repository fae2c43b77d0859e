"""`keras-dml collections`: list, drop and alias the collections of a Milvus database."""

import argparse
import json

__all__ = ["add_command", "run", "switch_advice"]

DESCRIPTION = (
    "List the collections of a Milvus database (a Milvus Lite file or a server's http(s) "
    "URI): name, aliases, the model that made the embeddings, its run, the item count and "
    "when it was created. Re-index after retraining without a pause: index the new model "
    "into a new collection while the old one serves (keras-dml index RUN --images DIR --uri "
    "URI --collection NEW), move the alias the searches use to it in one step "
    "(keras-dml collections URI alias ALIAS NEW), then drop the old collection "
    "(keras-dml collections URI drop OLD --yes). `index` and `search` take an alias as "
    "--collection.")


def add_command(commands):
    """Adds `collections` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "collections", help="list, drop and alias the collections of a Milvus database",
        description=DESCRIPTION)
    parser.add_argument("uri", metavar="URI",
                        help="a Milvus Lite file (FILE.db) or a server (http(s)://HOST:PORT)")
    _add_common(parser, formats=True)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="one row per collection (the default)")
    _add_common(listing, formats=True)
    drop = actions.add_parser(
        "drop", help="drop a keras_dml collection and its items for good",
        description="Drop a collection keras_dml made, with its items, for good. Without "
        "--yes nothing is dropped: the command says what would go. A collection that an "
        "alias points to is refused unless --with-aliases; an alias, or a collection "
        "keras_dml did not make, is always refused.")
    drop.add_argument("name", metavar="NAME", help="the collection (not an alias)")
    drop.add_argument("--yes", action="store_true", help="drop it (nothing is asked)")
    drop.add_argument("--with-aliases", action="store_true",
                      help="also remove the aliases that point to it")
    _add_common(drop)
    alias = actions.add_parser(
        "alias", help="point an alias to a collection in one step (create or move it)",
        description="Point ALIAS to the collection NAME: create the alias, or move it in one "
        "step (Milvus' alter_alias), so searches through it switch at once.")
    alias.add_argument("alias", metavar="ALIAS")
    alias.add_argument("name", metavar="NAME", help="the collection it points to")
    _add_common(alias)
    unalias = actions.add_parser("unalias", help="remove an alias (its collection stays)")
    unalias.add_argument("alias", metavar="ALIAS")
    _add_common(unalias)
    parser.set_defaults(handler=run, action="list", token=None, format="text")


def _add_common(parser, formats=False):
    """--token (and for a list --format) on the command and on each action, so they go
    before or after the action (the command's defaults hold where none is given)."""
    parser.add_argument("--token", default=argparse.SUPPRESS,
                        help="Milvus server token (user:password or an API key)")
    if formats:
        parser.add_argument("--format", choices=("text", "json"), default=argparse.SUPPRESS,
                            help="list output: text (default) or json")


def run(args):
    """`keras-dml collections`: runs the action; prints what it did."""
    from keras_dml.index.collections import Collections

    with Collections(args.uri, args.token) as collections:
        if args.action == "list":
            _print_list(collections.list(), args.format)
        elif args.action == "drop":
            _drop(collections, args)
        elif args.action == "alias":
            before = collections.alias(args.alias, args.name)
            new = _summary(collections.describe(args.name))
            if before is None:
                print(f"alias {args.alias} -> {new}")
            elif before == args.name:
                print(f"alias {args.alias} already points to {new}")
            else:
                print(f"alias {args.alias} moved: {_summary(collections.describe(before))} "
                      f"-> {new}")
        else:
            print(f"removed alias {args.alias} (of collection "
                  f"{collections.unalias(args.alias)})")
    return 0


def _drop(collections, args):
    """Drops a keras_dml collection with --yes; refuses first what would surprise."""
    collection = collections.describe(args.name)  # an unknown name or an alias: refused
    if collection.keras_dml and collection.aliases and not args.with_aliases:
        alias = collection.aliases[0]
        raise ValueError(f"collection {args.name} is what alias {', '.join(collection.aliases)} "
                         f"points to: move the alias first (keras-dml collections {args.uri} alias "
                         f"{alias} NEW), or pass --with-aliases to remove it as well.")
    if collection.keras_dml and not args.yes:
        raise ValueError(f"drop deletes collection {_summary(collection)} at {args.uri} for "
                         "good: pass --yes to drop it.")
    dropped = collections.drop(args.name, args.with_aliases)  # not keras_dml: refused
    aliases = (f"; removed alias {', '.join(dropped.aliases)}" if dropped.aliases else "")
    print(f"dropped collection {_summary(dropped)}{aliases}")


def _summary(collection):
    """`name (320 items, model sha256:..., run ...)`."""
    if not collection.keras_dml:
        return f"{collection.name} (not made by keras_dml)"
    run = f", run {collection.run}" if collection.run else ""
    return (f"{collection.name} ({collection.count} items, model "
            f"{collection.model_fingerprint or 'unknown'}{run})")


def _print_list(collections, output_format):
    if output_format == "json":
        print(json.dumps([c.to_dict() for c in collections], indent=2))
        return
    if not collections:
        print("no collections")
        return
    from keras_dml.index.collections import created_text

    header = ("NAME", "ALIASES", "MODEL", "ITEMS", "CREATED", "RUN")
    rows = [(c.name, ",".join(c.aliases) or "-",
             (c.model_fingerprint or "unknown") if c.keras_dml else "(not keras_dml)",
             "-" if c.count is None else str(c.count),
             created_text(c.created) if c.created else "-", c.run or "-")
            for c in collections]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [cell.rjust(w) if i == 3 else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join([*cells, row[-1]]))


def switch_advice(error, args):
    """The CLI's message for a `ModelMismatchError` of `index` or `search`: the
    mismatch, then the commands that switch the catalogue to the model at hand.

    Args:
        error: The `keras_dml.index.ModelMismatchError`.
        args: The command's arguments (`index`: run, images, uri, collection;
            `search`: index (the URI or folder), collection, run).
    """
    import os

    from keras_dml.index.milvus import DEFAULT_COLLECTION
    from keras_dml.index.storage import CONFIG

    run = error.given.get("run") or getattr(args, "run", None) or "RUN"
    uri = getattr(args, "uri", None) or getattr(args, "index", None)
    images = args.images if args.command == "index" else None  # search's are queries
    anyway = (" Or search anyway with --allow-mismatch if you know they agree."
              if hasattr(args, "allow_mismatch") else "")
    if uri is None or os.path.isfile(os.path.join(uri, CONFIG)):  # a saved index folder
        source = f" --images {images}" if images else ""
        return (f"{error.mismatch} Build an index with this model and search that one: "
                f"keras-dml index {run}{source} --output NEW_INDEX.{anyway}")
    name = getattr(args, "collection", None) or DEFAULT_COLLECTION
    old, images = _collection_behind(uri, name, getattr(args, "token", None), images)
    alias = name if old != name else "ALIAS"
    token = " --token TOKEN" if getattr(args, "token", None) else ""
    return (f"{error.mismatch} To switch to this model, index it into a new collection while "
            f"{old!r} serves, point the alias the searches use to it in one step, then drop "
            f"the old collection: keras-dml index {run} --images {images or 'DIR'} --uri "
            f"{uri}{token} --collection NEW; keras-dml collections {uri}{token} alias {alias} "
            f"NEW; keras-dml collections {uri}{token} drop {old} --yes.{anyway}")


def _collection_behind(uri, name, token, images):
    """`(collection, images)`: the collection the name stands for (itself, or an alias's
    target) and the image folder it records (unless `images` is given); the name
    and `images` as given when Milvus cannot tell."""
    from keras_dml.index.collections import Collections
    from keras_dml.index.milvus import read_record

    try:
        with Collections(uri, token) as collections:
            old = collections.target(name) or name
        if images is None:
            images = read_record(uri, old, token)["info"].get("images")
    except (ValueError, OSError, RuntimeError):
        return name, images
    return old, images
