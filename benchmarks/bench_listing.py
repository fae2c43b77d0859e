"""Listing and splitting a user's image folder or CSV list (no image is opened).

Generates `--classes` x `--per-class` empty `.jpg` files in a temporary folder
(`root/<class>/<image>`) and a CSV listing them, then times
`keras_dml.datasets.from_directory(root)` and `from_csv(list.csv)`: the listing
and the class-disjoint split, median of `--repeats` runs (the first run is
timed too: the file system's cache is warm after generating the tree). The
Python memory the listing allocates (tracemalloc peak of one more run) is
printed per file.

    python benchmarks/bench_listing.py            # 1,000 classes x 100 = 100,000 files
    python benchmarks/bench_listing.py --quick    # 20 classes x 10 = 200 files
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_tree(folder, classes, per_class):
    """`folder/c0000/000000.jpg`...: empty image-named files, and `list.csv` of them."""
    root = os.path.join(folder, "images")
    with open(os.path.join(folder, "list.csv"), "w") as listing:
        listing.write("path,label\n")
        for c in range(classes):
            name = f"c{c:04d}"
            os.makedirs(os.path.join(root, name))
            for i in range(per_class):
                file = f"{c * per_class + i:06d}.jpg"
                open(os.path.join(root, name, file), "w").close()
                listing.write(f"images/{name}/{file},{name}\n")
    return root, os.path.join(folder, "list.csv")


def measure(load, source, repeats):
    """`(median seconds, all seconds, traced peak bytes, splits)` of `load(source)`."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        splits = load(source)
        seconds.append(time.perf_counter() - started)
    tracemalloc.start()
    load(source)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(seconds), seconds, peak, splits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 classes x 10 files")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.classes, args.per_class, args.repeats = 20, 10, 3
    sys.path.insert(0, ROOT)
    from keras_dml.datasets.files import from_csv, from_directory

    folder = tempfile.mkdtemp(prefix="bench_listing_")
    try:
        started = time.perf_counter()
        root, listing = make_tree(folder, args.classes, args.per_class)
        files = args.classes * args.per_class
        print(f"generated {files:,} empty .jpg files in {args.classes:,} class folders in "
              f"{time.perf_counter() - started:.1f} s ({folder})")
        print("| source | files | median s | runs s | files / s | traced peak bytes / file |")
        print("|---|---|---|---|---|---|")
        for name, load, source in (("from_directory", from_directory, root),
                                   ("from_csv", from_csv, listing)):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a clean tree: any warning is a bug
                median, seconds, peak, splits = measure(load, source, args.repeats)
            assert len(splits.train) + len(splits.test) == files, "files were lost"
            runs = ", ".join(f"{s:.2f}" for s in seconds)
            print(f"| {name} | {files:,} | {median:.2f} | {runs} | {files / median:,.0f} | "
                  f"{peak / files:.0f} |", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
