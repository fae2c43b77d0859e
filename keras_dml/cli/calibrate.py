"""`keras-dml calibrate`: a match threshold for a target precision or FAR."""

import json

from keras_dml.cli.arguments import add_data_arguments, capped_k, embedded

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `calibrate` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "calibrate", help="choose a match threshold for a target precision or FAR",
        description="Score the pairs of a held-out split, or of a labelled folder or CSV list "
        "(--images), with a run's embedder, choose the "
        "lowest similarity threshold reaching the target, and write calibration.json, "
        "threshold_table.csv and the ROC/PR/histogram figures into <run>/calibration; "
        "optionally export a retriever that returns the match decision.")
    parser.add_argument("run", help="run directory (runs/<run>)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-precision", type=float, default=None)
    target.add_argument("--target-far", type=float, default=None)
    add_data_arguments(parser)
    parser.add_argument("--max-pairs", type=int, default=5_000_000,
                        help="pairs scored at most; sampled beyond (default 5e6)")
    parser.add_argument("--export", default=None, metavar="BASE_DIR",
                        help="also export a retriever with the threshold to "
                        "BASE_DIR/<version>, its gallery the --index (or the split)")
    parser.add_argument("--index", default=None,
                        help="gallery of the exported retriever (an index directory)")
    parser.add_argument("--k", type=int, default=5, help="retriever top-k (default 5)")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures")
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml calibrate`: threshold, table and figures into <run>/calibration."""
    import os

    from keras_dml.evaluation import calibrate_scores, pair_scores
    from keras_dml.index.runs import load_run

    run = load_run(args.run)
    embeddings, labels, _, info = embedded(args, run)
    if args.images is not None:
        embeddings, labels = _labelled(embeddings, labels, args.images)
    scores, same = pair_scores(embeddings, labels, max_pairs=args.max_pairs)
    target, value = (("precision", args.target_precision) if args.target_precision is not None
                     else ("far", args.target_far))
    calibration = calibrate_scores(scores, same, target, value)
    folder = os.path.join(args.run, "calibration")
    os.makedirs(folder, exist_ok=True)
    calibration.write_csv(os.path.join(folder, "threshold_table.csv"))
    source = ({"images": info["images"]} if args.images is not None
              else {"dataset": info["dataset"], "split": args.split})
    summary = {**calibration.to_dict(), **source, "pairs": int(len(scores))}
    if not args.no_plots:
        from keras_dml import plots

        metrics = plots.verification_curves(scores, same, os.path.join(
            folder, "verification_curves.png"), threshold=calibration.threshold)
        plots.score_histograms(scores, same, os.path.join(folder, "score_histograms.png"),
                               threshold=calibration.threshold)
        summary["verification"] = {k: v for k, v in metrics.items() if k != "curves"}
    with open(os.path.join(folder, "calibration.json"), "w") as f:
        json.dump(summary, f, indent=2)
    achieved = calibration.achieved
    print(f"threshold {calibration.threshold:.6f} for {target} "
          f"{'>=' if target == 'precision' else '<='} {value}: precision "
          f"{achieved['precision']:.4f}, recall {achieved['recall']:.4f}, FAR "
          f"{achieved['far']:.2e} on {len(scores)} pairs of "
          f"{args.images or summary['dataset'] + '/' + args.split}; "
          f"support: {calibration.support_same:,} same-class pairs of {calibration.support:,} "
          "at or above the threshold")  # (a too small support is warned about)
    print(f"written: {folder}/calibration.json, threshold_table.csv"
          + ("" if args.no_plots else ", verification_curves.png, score_histograms.png"))
    if args.export:
        _export_calibrated(args, run, calibration.threshold, embeddings, labels)
    return 0


def _labelled(embeddings, labels, images):
    """The images with a class: calibration pairs need labels."""
    import numpy as np

    if labels is None:
        raise ValueError(f"{images} holds no class folders (or labels): calibration needs "
                         "labelled images, root/<class>/<image>.")
    labels = np.asarray(labels)
    keep = labels != ""
    if not keep.all():
        print(f"calibrate: left out {int((~keep).sum())} images outside any class folder")
    return embeddings[keep], labels[keep]


def _export_calibrated(args, run, threshold, embeddings, labels):
    """The retriever: runs on in-memory datasets take float images, others encoded bytes."""
    from keras_dml.export import export_retriever
    from keras_dml.index import Index
    from keras_dml.index.runs import preprocessing

    if args.index:
        index = Index.load(args.index)
        embeddings, labels = index.embeddings, index.labels

    path = export_retriever(
        run.embedder, args.export, gallery_embeddings=embeddings, gallery_labels=labels,
        k=capped_k(args.k, len(labels), "calibrate", "retriever gallery items"),
        threshold=threshold,
        input_format="images" if run.in_memory else "image_bytes",
        preprocessing=None if run.in_memory else preprocessing(run),
        run_info={"run": run.run_dir, "threshold": threshold})
    print(f"retriever with threshold: {path}")
