"""`keras-dml evaluate`: retrieval metrics of a run on any data, per class, with a report."""

import os

__all__ = ["add_command", "run"]

HELP = "measure a run's retrieval on a dataset, a folder, a CSV or a query/gallery split"
_DESCRIPTION = (
    "Embed images with a run's embedder (RUN: a run folder or a .keras file) and print "
    "Recall@K, Precision@K, MAP@R and mAP. Data: the run's test split (default), --dataset "
    "NAME [--split], --images DIR|CSV (each image searched among the others, leave-one-out; a "
    "CSV with is_query and is_gallery columns, as Open Metric Learning writes them, is a "
    "query/gallery split, its optional sequence column a group id whose items are not "
    "searched for each other), or --query DIR|CSV --gallery DIR|CSV. Writes metrics.json, "
    "per_class.csv (each class's size and metrics, lowest Recall@1 first) and report.html "
    "(worst queries, weakest classes, confused pairs) under --output (default "
    "RUN/evaluations/<date>-<time>). --rerank measures re-rankings beside the exact ranking, "
    "one row each; per_class.csv and the report's failures follow the first method given. "
    "With --backbone NAME instead of RUN (hub:PRESET or a Keras Applications name such as "
    "ResNet50): the pretrained backbone's zero-shot retrieval (default --output "
    "evaluations/<date>-<time>).")


def add_command(commands):
    """Adds `evaluate` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser("evaluate", help=HELP, description=_DESCRIPTION)
    from keras_dml.cli.arguments import add_run_or_backbone

    add_run_or_backbone(parser, "run folder (runs/<run>) or a .keras model file")
    data = parser.add_argument_group("data (one of)")
    data.add_argument("--dataset", default=None,
                      help="dataset name (default: the run's training dataset)")
    data.add_argument("--split", default="test",
                      help="test (default: held-out classes), train, query or gallery")
    data.add_argument("--data-dir", default=None, help="local dataset folder")
    data.add_argument("--images", default=None, metavar="DIR|CSV",
                      help="a folder (root/<class>/<image>) or a CSV (path,label; or Open "
                      "Metric Learning's path,label,is_query,is_gallery[,sequence])")
    data.add_argument("--query", default=None, metavar="DIR|CSV",
                      help="query images (with --gallery)")
    data.add_argument("--gallery", default=None, metavar="DIR|CSV",
                      help="gallery images (with --query)")
    from keras_dml.cli.arguments import add_skip_argument

    add_skip_argument(data)
    how = parser.add_argument_group("evaluation")
    how.add_argument("--ks", default="1,2,4,8", help="the K of Recall@K, Precision@K "
                     "(default 1,2,4,8)")
    how.add_argument("--rerank", default=None, nargs="+", metavar="METHOD[:k=v,...]",
                     help="also measure re-rankings, several separated by spaces: qe "
                     "(alpha query expansion), dba (database-side augmentation) or "
                     "k_reciprocal, with options as qe:n=2,mutual=0 or "
                     "k_reciprocal:k1=20,k2=6,lam=0.3, and none (the exact ranking, always "
                     "measured); one row each. The first given is the ranking per_class.csv "
                     "and the report's worst queries, weakest classes and confused pairs show")
    out = parser.add_argument_group("output")
    out.add_argument("--output", default=None,
                     help="folder for metrics.json, per_class.csv and report.html (default "
                     "RUN/evaluations/<date>-<time>)")
    out.add_argument("--overwrite", action="store_true",
                     help="write into an existing --output folder")
    out.add_argument("--no-report", action="store_true", help="skip report.html")
    parser.set_defaults(handler=run)


def _ks(text):
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise ValueError(f"--ks must list positive integers such as 1,2,4,8, got {text!r}.")
    return tuple(ks)


def _output_folder(args, run):
    import time

    folder = args.output or os.path.join(run.run_dir or os.curdir, "evaluations",
                                         time.strftime("%Y%m%d-%H%M%S"))
    if os.path.exists(folder) and os.listdir(folder) and not args.overwrite:
        raise FileExistsError(f"{folder} exists and is not empty; pass --overwrite or "
                              "another --output.")
    os.makedirs(folder, exist_ok=True)
    return folder


def run(args):
    """`keras-dml evaluate`: prints the metrics, writes the per-class table and report."""
    import json

    from keras_dml.cli import evaluation_data
    from keras_dml.cli.arguments import load_run_or_backbone
    from keras_dml.cli.evaluation_table import measure, rankings, table

    ks = _ks(args.ks)
    chosen = rankings(args.rerank)
    sources = [name for name in ("images", "query", "dataset") if getattr(args, name)]
    if (args.query is None) != (args.gallery is None):
        raise ValueError("Pass --query and --gallery together.")
    if len(sources) > 1:
        raise ValueError(f"Pass one data source, got --{' and --'.join(sources)}.")
    if args.backbone is not None and not sources:
        raise ValueError("--backbone has no training data of its own: pass --images, "
                         "--query and --gallery, or --dataset.")
    model = load_run_or_backbone(args)
    folder = _output_folder(args, model)
    data = evaluation_data.load(args, model)
    print(f"evaluating {data.description}", flush=True)
    measure(data, ks, chosen)
    primary = next(r for r in chosen if r.primary)
    report = primary.report
    print("\n".join(table(chosen)))
    print(f"({report.metrics['num_queries']} queries; per_class.csv and the report's failures: "
          f"{primary.title})")
    exact = next(r for r in chosen if r.method == "none")
    summary = {"data": data.description, "rerank": args.rerank,
               "results": [{"ranking": r.title, "metrics": r.report.metrics,
                            "seconds": round(r.seconds, 2)}
                           | ({} if r is exact else
                              {"extra_seconds": round(r.seconds - exact.seconds, 2)})
                           for r in chosen],
               "failures_ranking": primary.title}
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    report.write_per_class_csv(os.path.join(folder, "per_class.csv"), ks)
    written = ["metrics.json", "per_class.csv"]
    if not args.no_report:
        from keras_dml.training.outputs import have_matplotlib as _have_matplotlib

        if _have_matplotlib():
            data.write_report(os.path.join(folder, "report.html"), report,
                              [(r.title, r.report.metrics) for r in chosen], primary.title)
            written.append("report.html")
    print(f"written: {', '.join(os.path.join(folder, name) for name in written)}")
    return 0
