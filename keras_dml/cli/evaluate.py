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
    "RUN/evaluations/<date>-<time>). With --backbone hub:PRESET instead of RUN: the "
    "pretrained backbone's zero-shot retrieval (default --output "
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
    how.add_argument("--rerank", default=None, metavar="METHOD[:k=v,...]",
                     help="also measure a re-ranking: qe (alpha query expansion), dba "
                     "(database-side augmentation) or k_reciprocal, with options as "
                     "qe:n=2,mutual=0 or k_reciprocal:k1=20,k2=6,lam=0.3")
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
    import time

    from keras_dml.cli import evaluation_data
    from keras_dml.cli.arguments import run_or_backbone
    from keras_dml.evaluation.query_gallery import retrieval_report
    from keras_dml.index.runs import load_run

    ks = _ks(args.ks)
    if args.rerank is not None:
        from keras_dml.index import rerank

        rerank.get(args.rerank)  # a bad name fails before any embedding
    chosen = [name for name in ("images", "query", "dataset") if getattr(args, name)]
    if (args.query is None) != (args.gallery is None):
        raise ValueError("Pass --query and --gallery together.")
    if len(chosen) > 1:
        raise ValueError(f"Pass one data source, got --{' and --'.join(chosen)}.")
    source = run_or_backbone(args)
    if args.backbone is not None and not (args.images or args.query or args.dataset):
        raise ValueError("--backbone has no training data of its own: pass --images, "
                         "--query and --gallery, or --dataset.")
    model = load_run(source)
    folder = _output_folder(args, model)
    data = evaluation_data.load(args, model)
    print(f"evaluating {data.description}", flush=True)
    rows = []
    started = time.perf_counter()
    report = retrieval_report(*data.arrays(), ks=ks, **data.exclusions())
    rows.append(("exact ranking", report.metrics, time.perf_counter() - started))
    if args.rerank is not None:
        started = time.perf_counter()
        report = retrieval_report(*data.arrays(), ks=ks, rerank=args.rerank,
                                  **data.exclusions())
        rows.append((f"re-ranked: {args.rerank}", report.metrics,
                     time.perf_counter() - started))
    for title, metrics, seconds in rows:
        shown = "  ".join(f"{key} {100 * value:.1f}" for key, value in metrics.items()
                          if not key.startswith("num_"))
        print(f"{title:<28} {shown}  ({metrics['num_queries']} queries, {seconds:.1f} s)")
    summary = {"data": data.description, "rerank": args.rerank,
               "results": [{"ranking": t, "metrics": m, "seconds": round(s, 2)}
                           for t, m, s in rows]}
    if args.rerank is not None:
        extra = rows[1][2] - rows[0][2]
        summary["rerank_extra_seconds"] = round(extra, 2)
        print(f"re-ranking took {extra:+.1f} s over the exact ranking "
              f"({1000 * extra / max(report.metrics['num_queries'], 1):+.2f} ms per query)")
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(summary, f, indent=2)
    report.write_per_class_csv(os.path.join(folder, "per_class.csv"), ks)
    written = ["metrics.json", "per_class.csv"]
    if not args.no_report:
        from keras_dml.training.outputs import have_matplotlib as _have_matplotlib

        if _have_matplotlib():
            data.write_report(os.path.join(folder, "report.html"), report,
                              [(t, m) for t, m, _ in rows])
            written.append("report.html")
    print(f"written: {', '.join(os.path.join(folder, name) for name in written)}")
    return 0
