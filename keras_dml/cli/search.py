"""`keras-dml search`: the top-k index items of image files."""

import json


def add_command(commands):
    """Adds `search` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "search", help="print the top-k index items of image files",
        description="Embed image files with the index's run embedder and print the k most "
        "similar items (their image path when the index holds one, else their id; label; "
        "score), and with --threshold the match decision.")
    parser.add_argument("index", help="index directory written by `keras-dml index`")
    parser.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    parser.add_argument("--k", type=int, default=5, help="default 5")
    parser.add_argument("--threshold", default=None,
                        help="similarity threshold for match/unknown, or 'calibrated' "
                        "(the run's calibration.json)")
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml search`: prints the top-k of each image (and the match decision)."""
    from keras_dml.index import Index
    from keras_dml.index.runs import image_files, load_run

    index = Index.load(args.index)
    if "run" not in index.info:
        raise ValueError(f"{args.index} records no run to embed images with: build it with "
                         "`keras-dml index RUN`.")
    run = load_run(index.info["run"])
    index.check_model(run.embedder, run=index.info["run"])  # a retrained run: refused
    threshold = _threshold(args.threshold, index.info["run"])
    queries = run.embedder.predict(image_files(run, args.images), verbose=0)
    result = index.search(queries, min(args.k, len(index)))
    matches = None if threshold is None else index.match(queries, threshold)
    named = _class_namer(index.info.get("class_names"))
    for row, path in enumerate(args.images):
        decision = "" if matches is None else f"  match: {named(matches[row])}"
        print(f"{path}{decision}")
        for rank in range(result.ids.shape[1]):
            item = result.metadata[row][rank]
            item = f"id {result.ids[row, rank]:<8}" if item is None else str(item)
            print(f"  {rank + 1:>2}. {item}  label {named(result.labels[row, rank]):<10} "
                  f"score {result.scores[row, rank]:.4f}")
    return 0


def _threshold(value, run_dir):
    import os

    if value is None:
        return None
    if value == "calibrated":
        path = os.path.join(run_dir, "calibration", "calibration.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist: run `keras-dml calibrate` first.")
        with open(path) as f:
            return float(json.load(f)["threshold"])
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--threshold must be a number or 'calibrated', got {value!r}.") from None


def _class_namer(class_names):
    """`label -> "label (class name)"` when the index records its split's class names."""
    import numpy as np

    def named(label):
        if class_names and isinstance(label, (int, np.integer)) and 0 <= label < len(
                class_names):
            return f"{label} ({class_names[label]})"
        return str(label) if str(label) else "-"

    return named
