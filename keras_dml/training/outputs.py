"""What a finished run writes beside its model: the projector files, the figures and
report, and the SavedModel export."""

import os
import time

from keras_dml import backbones, backend
from keras_dml.training.projector import write_projector

__all__ = ["TSNE_ITERATIONS", "TSNE_POINTS", "TSNE_THREADS", "can_export", "export_run",
           "have_matplotlib", "have_tensorboard", "run_info", "should_export", "write_figures",
           "write_plots", "write_run_projector"]


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('figures skipped: matplotlib is not installed (pip install "keras_dml[plots]")')
        return False
    return True


def have_tensorboard():
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print('TensorBoard logs skipped: pip install "keras_dml[tensorboard]" (the projector '
              "files are written)")
        return False
    if not backend.tensorflow_installed():  # Keras' callback writes with tf.summary
        print("TensorBoard logs skipped: Keras' TensorBoard callback needs TensorFlow (the "
              "projector files are written)")
        return False
    return True


#: The run's t-SNE map: points, iterations and OpenMP threads. One thread: on a busy
#: machine (TensorFlow's own thread pools, other jobs) t-SNE's OpenMP threads wait
#: for each other.
TSNE_POINTS, TSNE_ITERATIONS, TSNE_THREADS = 1000, 500, 1


def write_plots(run_dir, recall_history, split, embeddings, steps_per_epoch):
    """Recall@K per step, a t-SNE map and a retrieval grid (of in-memory images or of
    the split's image files), each announced on a line as it is drawn."""
    from keras_dml import plots

    started = time.perf_counter()
    images = split.images if split.images is not None else split.paths
    figures = {
        "recall_curves": ("Recall@K curves", lambda path: plots.recall_curves(
            recall_history, path, steps_per_epoch=steps_per_epoch)),
        "tsne": (f"a t-SNE map of {min(len(embeddings), TSNE_POINTS):,} embeddings",
                 lambda path: plots.tsne_map(
                     embeddings, split.labels, path, max_points=TSNE_POINTS,
                     max_iter=TSNE_ITERATIONS, threads=TSNE_THREADS,
                     class_names=split.class_names)),
        "retrievals": ("a grid of top-5 retrievals", lambda path: plots.retrieval_grid(
            images, split.labels, embeddings, path, class_names=split.class_names)),
    }
    written = []
    for name, (what, draw) in figures.items():
        print(f"figures: drawing {what}", flush=True)
        draw(os.path.join(run_dir, f"{name}.png"))
        written.append(name)
    print(f"figures: {', '.join(f'{name}.png' for name in written)} drawn in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return sorted(written)


def can_export(run_dir):
    """Whether this process can write the SavedModel export; if not, prints why."""
    if not backend.tensorflow_installed():
        print('export skipped: the SavedModel export needs TensorFlow, which is not '
              'installed (pip install "keras_dml[tensorflow]"); the run saved model.keras',
              flush=True)
        return False
    if not backend.is_tensorflow():
        print(f"export skipped: the SavedModel export traces the model in TensorFlow and "
              f"Keras runs on {backend.name()} here; export the saved model.keras with "
              f"KERAS_BACKEND=tensorflow keras-dml export {run_dir}", flush=True)
        return False
    return True


def run_info(config, after, input_shape, preprocessing):
    pixels = "[0, 255]" if backbones.takes_raw_pixels(config.backbone) else "[0, 1]"
    return {"dataset": config.dataset, "loss": config.loss, "recall_after": after,
            "input": f"float32 images in {pixels} of shape " + str(tuple(input_shape))
            if preprocessing is None else "encoded images"}


def write_run_projector(log_dir, embeddings, split):
    """TensorBoard's projector files of the evaluated `split` (thumbnails where
    TensorFlow is installed to draw them); returns the projector's config path."""
    thumbnails = backend.tensorflow_installed()  # resized and encoded by TensorFlow
    if not thumbnails:
        print("projector: no thumbnail sprite (it needs TensorFlow); vectors and labels "
              "are written", flush=True)
    return write_projector(
        log_dir, embeddings, split.labels,
        images=split.images if thumbnails else None,
        paths=None if split.images is not None or not thumbnails else split.paths,
        class_names=split.class_names)["config"]


def write_figures(run_dir, recall_history, split, embeddings, steps_per_epoch, before, after):
    """The figures (`write_plots`) and the HTML report; returns (figure names, report
    path)."""
    from keras_dml.plots.report import write_run_report

    figures = write_plots(run_dir, recall_history, split, embeddings, steps_per_epoch)
    report = write_run_report(run_dir, split, embeddings, before, after)
    print(f"report: {report}", flush=True)
    return figures, report


def should_export(summary, config):
    """Whether the run's SavedModel export is written; if not, prints why: a verdict
    against the model (unless `export_anyway`), or no TensorFlow to trace it."""
    if summary["verdict"] and not config.export_anyway:
        print(f"export skipped: {summary['verdict']} (--export-anyway exports it)",
              flush=True)
        return False
    return can_export(summary["run_dir"])


def export_run(model, summary, config, input_shape, preprocessing):
    """Writes the run's SavedModel export; returns its folder."""
    from keras_dml.export import export_embedder

    return export_embedder(
        model.embedder(), summary["export"]["base_dir"],
        input_format=summary["export"]["input_format"], preprocessing=preprocessing,
        run_info={"run": os.path.abspath(summary["run_dir"]),
                  **run_info(config, summary["recall_after"], input_shape, preprocessing)})
