"""`keras-dml verify`: every image file of a folder or CSV list that cannot be read."""

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `verify` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "verify", help="list every unreadable image of a folder or CSV list, in one pass",
        description="Read and decode every image of a folder (recursively: "
        "root/<class>/<image>) or of a CSV list (path,label) once and list each one that "
        "is missing or cannot be decoded (truncated, or another format saved as an image), "
        "one per line. Exit code 0 when all read, 1 when some do not: fix or remove them, "
        "or train with --skip-bad-images.")
    parser.add_argument("images", metavar="DIR|CSV", help="folder of images, or CSV file")
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml verify`: prints each unreadable file; 1 if there is one, else 0."""
    import os
    import time

    from keras_dml.data.verify import unreadable_files
    from keras_dml.datasets.files import csv_paths
    from keras_dml.index.catalogue import list_images

    started = time.perf_counter()
    if os.path.isfile(args.images):  # every listed row, a missing file too
        paths = csv_paths(args.images)
    else:
        paths = list_images(args.images).paths
    bad = unreadable_files(paths)
    for path, reason in bad:
        print(f"unreadable: {path} ({reason})")
    print(f"{len(paths) - len(bad)} of {len(paths)} images read and decode; {len(bad)} "
          f"unreadable ({time.perf_counter() - started:.1f} s)")
    return 1 if bad else 0
