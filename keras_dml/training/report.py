"""What `keras-dml train` prints: the settings, progress, Recall@K before and after
training, and a closing summary."""

import os
import sys

from keras_dml.training.evaluation import KS
from keras_dml.training.inputs import evaluation_splits

__all__ = ["ConsoleReport", "fit_verbose", "metrics_row", "metrics_table"]


class ConsoleReport:
    """What `keras-dml train` prints: the settings, progress bars, R@K, a closing summary."""

    progress = True

    def start(self, config, splits, run_dir):
        train, test = splits.train, evaluation_splits(splits)[0]
        if not config.evaluates:
            tested = ("no test images (--test-classes 0 without --test-dir): the run measures "
                      "no Recall@K")
        else:
            source = "" if config.test_dir is None else f", --test-dir {config.test_dir}"
            tested = f"{test.num_classes} test classes ({len(test)} images{source})"
        print(f"{config.dataset}: {train.num_classes} training classes ({len(train)} images), "
              f"{tested}")
        width = "" if config.width is None else f" (width {config.width})"
        if config.weights != "none":
            width += f" from {config.weights}"
        print(f"{config.backbone}{width}, {config.embedding_dim}-d, {config.loss}; batches of "
              f"{config.classes_per_batch} classes x {config.samples_per_class}; "
              f"{config.epochs} epochs x {config.steps_per_epoch} steps; run: {run_dir}",
              flush=True)

    def metrics(self, title, metrics):
        print(metrics_row(title, metrics), flush=True)

    def finish(self, summary):
        print()
        if summary["recall_after"] is None:
            print(f"evaluation: {summary['evaluation']}: no Recall@K before or after training")
        else:
            print(metrics_table(summary["recall_before"], summary["recall_after"]))
        minutes, seconds = divmod(round(summary["seconds"]), 60)
        print(f"time: {minutes} min {seconds:02d} s (training {summary['train_seconds']:.0f} s)")
        run_dir = summary["run_dir"]
        files = ", ".join(sorted(os.listdir(run_dir)))
        print(f"run:        {run_dir}/ ({files})")
        if summary.get("export_dir"):
            print(f"SavedModel: {summary['export_dir']}")
        skipped = summary.get("skipped_images") or []
        if skipped:
            print(f"left out {len(skipped)} unreadable image file(s) (--skip-bad-images; "
                  f"summary.json lists them): {'; '.join(skipped[:3])}"
                  f"{' ...' if len(skipped) > 3 else ''}")
        if summary.get("verdict"):
            print(f"WARNING: {summary['verdict']}.", flush=True)


def metrics_row(title, metrics, ks=KS):
    """One printed line: `title`, then Recall@K for each K and MAP@R, in %."""
    row = "  ".join(f"R@{k} {100 * metrics[f'recall@{k}']:5.1f}" for k in ks)
    return f"{title:<16}{row}  MAP@R {100 * metrics['map@r']:5.1f}"


def metrics_table(before, after, ks=KS):
    """Recall@K and MAP@R (%) before and after training, and the gain."""
    keys = [f"recall@{k}" for k in ks] + ["map@r"]
    heads = [f"R@{k}" for k in ks] + ["MAP@R"]
    lines = [f"{'':<17}" + "".join(f"{h:>7}" for h in heads)]
    for title, values in (("before training", before), ("after training", after)):
        lines.append(f"{title:<17}" + "".join(f"{100 * values[k]:7.1f}" for k in keys))
    lines.append(f"{'gain':<17}" + "".join(f"{100 * (after[k] - before[k]):+7.1f}" for k in keys))
    return "\n".join(lines)


def fit_verbose(report):
    """Keras' progress bar on a terminal, one line per epoch otherwise; none when silent."""
    if not getattr(report, "progress", False):
        return 0
    return 1 if sys.stdout.isatty() else 2
