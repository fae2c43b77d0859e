"""The Omniglot protocol: one fixed, small, real benchmark any keras_dml loss plugs into.

Omniglot's 964 background characters train, its 659 evaluation characters test
(13,180 images; every image is a query against all the others, leave-one-out,
cosine similarity; Recall@1/2/4/8 and MAP@R). Images are area-resized from
105 x 105 to 28 x 28 with ink = 1 on a 0 background. The network is a 3-block
CNN trained from scratch: (3x3 conv 64, batch norm, ReLU, 2x2 max-pool) three
times, flatten, dense 128, L2 normalisation. Adam 1e-3, 2,000 steps of
32 classes x 4 drawings. The batch order is a NumPy function of the seed, so the
PyTorch side (`benchmarks/pml_omniglot.py`) trains on exactly the same batches.

    from omniglot_protocol import run_protocol
    run_protocol(keras_dml.losses.InstanceCrossEntropy())   # {"R@1": 83.., ...}

    python examples/omniglot_protocol.py --loss InstanceCrossEntropy --steps 2000
    python examples/omniglot_protocol.py --loss ProxyAnchor \
        --loss-args '{"proxy_lr_multiplier": 100}' --out /tmp/pa.json

The data is the bundled Omniglot of `keras_dml.datasets` when it has one, else
the official-layout npz files in `--data` (`../shared/datasets/omniglot`).
Everything but `run_protocol` and `main` is NumPy only, so the PyTorch side can
import it without TensorFlow.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ../shared/datasets from the project root (a git worktree may sit one level deeper).
DATA = next((path for path in (os.path.join(_ROOT, *up, "shared", "datasets", "omniglot")
                               for up in (("..",), ("..", "..")))
             if os.path.isdir(path)), os.path.join(_ROOT, "..", "shared", "datasets", "omniglot"))
SIZE = 28
KS = (1, 2, 4, 8)
_CACHE = {}


def _area_matrix(source, target):
    """(target, source) weights of exact area averaging: row i averages the source
    pixels under output pixel i, each by the length of its overlap."""
    scale = source / target
    matrix = np.zeros((target, source), np.float64)
    for i in range(target):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(int(np.ceil(hi)), source)):
            matrix[i, j] = min(hi, j + 1) - max(lo, j)
    return matrix / scale


def ink_images(images, size=SIZE):
    """Official Omniglot images (n, 105, 105), True/255 = white -> float32
    (n, size, size, 1) in [0, 1] with ink = 1, area-resized."""
    images = np.asarray(images)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    white = images.astype(np.float32) / (255.0 if images.dtype == np.uint8 else 1.0)
    rows = _area_matrix(images.shape[1], size).astype(np.float32)
    cols = _area_matrix(images.shape[2], size).astype(np.float32)
    ink = rows @ ((1.0 - white) @ cols.T)  # (size, H) @ (n, H, size)
    return np.clip(ink, 0.0, 1.0)[..., np.newaxis]


def _read_npz(path):
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"Omniglot file {path!r} is missing: pass --data (data_dir) pointing at the folder "
            "with images_background.npz and images_evaluation.npz.")
    with np.load(path, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    return images.reshape(-1, *images.shape[2:]), labels.reshape(-1)


def load_data(data_dir=None):
    """(x_train, y_train, x_test, y_test): float32 (n, 28, 28, 1) with ink = 1, and
    int32 labels (train 0..963, test 0..658). Cached per process."""
    data_dir = os.path.abspath(data_dir or DATA)
    if data_dir not in _CACHE:
        splits = []
        for name in ("images_background.npz", "images_evaluation.npz"):
            images, labels = _read_npz(os.path.join(data_dir, name))
            _, ids = np.unique(labels, return_inverse=True)
            splits += [ink_images(images), ids.astype(np.int32)]
        _CACHE[data_dir] = tuple(splits)
    return _CACHE[data_dir]


def with_rotated_classes(images, labels):
    """The training set plus each character rotated by 90, 180 and 270 degrees as three new
    characters (the Omniglot augmentation of Vinyals et al. 2016): 4 x the classes."""
    from keras_dml.datasets.base import rotated_classes

    return rotated_classes(images, labels, int(labels.max()) + 1)


def batch_order(labels, classes_per_batch, samples_per_class, steps, seed):
    """(steps, C k) int64 indices into `labels`: each step C distinct classes
    (classes are visited in reshuffled passes, so each is seen about equally often),
    k distinct samples of each. Identical for every loss and both frameworks."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    members = {c: np.flatnonzero(labels == c) for c in classes}
    too_small = [c for c in classes if len(members[c]) < samples_per_class]
    if classes_per_batch > len(classes) or too_small:
        raise ValueError(f"cannot draw {classes_per_batch} classes x {samples_per_class} "
                         f"samples from {len(classes)} classes ({len(too_small)} too small).")
    rng = np.random.default_rng(seed)
    order, queue = np.empty((steps, classes_per_batch * samples_per_class), np.int64), []
    for step in range(steps):
        if len(queue) < classes_per_batch:
            queue += [c for c in rng.permutation(classes) if c not in queue]
        chosen, queue = queue[:classes_per_batch], queue[classes_per_batch:]
        order[step] = np.concatenate(
            [rng.choice(members[c], samples_per_class, replace=False) for c in chosen])
    return order


def metrics_from_embeddings(embeddings, labels):
    """Recall@1/2/4/8 and MAP@R in percent, leave-one-out, cosine (keras_dml.evaluation)."""
    from keras_dml.evaluation import retrieval_metrics

    result = retrieval_metrics(embeddings, labels, ks=KS, metrics=("recall@k", "map@r"))
    row = {f"R@{k}": 100.0 * result[f"recall@{k}"] for k in KS}
    row["MAP@R"] = 100.0 * result["map@r"]
    return row


# -- the Keras side ---------------------------------------------------------------------------

def build_cnn(dim=128, size=SIZE):
    """The protocol's CNN as a `DMLModel`: `keras_dml.backbones.cnn3` (3 x (conv 3x3 64,
    BN, ReLU, max-pool), flatten) and `EmbeddingHead(dim)` (dense + L2)."""
    from keras_dml import backbones
    from keras_dml.layers import EmbeddingHead
    from keras_dml.models import DMLModel

    features = backbones.cnn3((size, size, 1))
    return DMLModel(features.input, EmbeddingHead(dim, name="embedding")(features.output),
                    name="omniglot_cnn")


def run_protocol(loss, steps=2000, seed=0, classes_per_batch=32, samples_per_class=4,
                 learning_rate=1e-3, warmup_steps=0, schedule="constant", weight_decay=0.0,
                 dim=128, augment_shift=0.0, augment_rotation=0.0, augment_scale=0.0,
                 rotated_classes=False, eval_every=None, order=None, test_classes=None,
                 run_eagerly=False, data_dir=None, initial_weights=None, save_weights=None,
                 verbose=False):
    """Train the protocol's CNN with `loss` and evaluate on the 659 test characters.

    Args:
        loss: a keras_dml loss instance (proxy losses with `num_classes=964`).
        steps: training steps. Defaults to 2000.
        seed: weights, batch order and augmentation seed. Defaults to 0.
        classes_per_batch, samples_per_class: the C x k batch design (32 x 4).
        learning_rate: Adam's peak learning rate. Defaults to 1e-3.
        warmup_steps: linear warm-up from 0. Defaults to 0.
        schedule: "constant" or "cosine" (decay to 0 at `steps`).
        weight_decay: AdamW's decoupled weight decay (0: Adam). Defaults to 0.
        dim: embedding size. Defaults to 128.
        augment_shift: random translation up to this many pixels. Defaults to 0.
        augment_rotation: random rotation up to this many degrees. Defaults to 0.
        augment_scale: random zoom up to this fraction. Defaults to 0.
        rotated_classes: also train on the 90/180/270-degree rotations of every
            character as new characters (`with_rotated_classes`; 3,856 classes; proxy
            losses need `num_classes=3856`). Defaults to False.
        eval_every: also evaluate every this many steps (for curves). Defaults to None.
        order: (steps, B) training indices of another batch design (replaces the
            C x k order). Defaults to None.
        test_classes: evaluate on the first this many test characters only (smoke
            runs). Defaults to None (all 659).
        run_eagerly: no tf.function (cheaper than tracing for a few smoke steps).
        data_dir: folder of the official npz files. Defaults to the shared dataset.
        initial_weights: a `.weights.h5` file of the protocol's CNN (same `dim`) to start
            from instead of a random initialisation (fine-tuning). Defaults to None.
        save_weights: write the trained weights to this `.weights.h5` file (an existing
            file is an error). Defaults to None.

    Returns:
        dict: R@1, R@2, R@4, R@8, MAP@R (percent, after training), untrained R@1,
        train_seconds, final_loss, steps and, with `eval_every`, a "curve" list of
        (step, R@1, MAP@R).
    """
    import keras
    import tensorflow as tf

    from keras_dml.data.options import steady
    from keras_dml.evaluation import embed_dataset
    from keras_dml.training import augmentation, learning_rate_schedule
    from keras_dml.training.model import adam

    x_train, y_train, x_test, y_test = load_data(data_dir)
    if rotated_classes:
        x_train, y_train = with_rotated_classes(x_train, y_train)
    if test_classes:
        x_test, y_test = x_test[y_test < test_classes], y_test[y_test < test_classes]
    if order is None:
        order = batch_order(y_train, classes_per_batch, samples_per_class, steps, seed)
    elif len(order) < steps:
        raise ValueError(f"order holds {len(order)} batches, fewer than steps={steps}.")
    if save_weights and os.path.exists(save_weights):
        raise FileExistsError(f"save_weights: {save_weights} exists; remove it or pick another "
                              "path.")
    keras.utils.set_random_seed(seed)
    model = build_cnn(dim)
    if initial_weights:
        model.load_weights(initial_weights)
    rate = learning_rate_schedule(learning_rate, steps, warmup_steps, schedule)
    model.compile(optimizer=adam(rate, weight_decay), loss=loss, jit_compile=False,
                  run_eagerly=run_eagerly)

    images, labels = tf.constant(x_train), tf.constant(y_train)
    augment = augmentation(augment_shift, augment_rotation, augment_scale, SIZE, seed)

    def gather(indices):
        batch = tf.gather(images, indices)
        if augment is not None:
            batch = augment(batch, training=True)
        return batch, tf.gather(labels, indices)

    def batches(first, count):
        return steady(tf.data.Dataset.from_tensor_slices(order[first:first + count])
                      .map(gather).prefetch(2))

    def evaluate():
        embeddings, _ = embed_dataset(model, (x_test, y_test), batch_size=1024)
        return metrics_from_embeddings(embeddings, y_test)

    untrained = evaluate()
    chunk = eval_every or steps
    curve, history, seconds, done = [(0, untrained["R@1"], untrained["MAP@R"])], None, 0.0, 0
    while done < steps:
        todo = min(chunk, steps - done)
        start = time.perf_counter()
        history = model.fit(batches(done, todo), epochs=1,
                            verbose=2 if verbose else 0)
        seconds += time.perf_counter() - start
        done += todo
        if done < steps:
            row = evaluate()
            curve.append((done, row["R@1"], row["MAP@R"]))
    result = evaluate()
    curve.append((steps, result["R@1"], result["MAP@R"]))
    if save_weights:
        model.save_weights(save_weights)
    result.update(untrained_R1=untrained["R@1"], train_seconds=seconds, steps=steps,
                  final_loss=float(history.history["loss"][-1]))
    if eval_every:
        result["curve"] = curve
    return result


def make_loss(name, loss_args=None, num_classes=964):
    """A keras_dml loss by class name; proxy losses get `num_classes` (964)."""
    import inspect

    from keras_dml import losses

    cls = getattr(losses, name, None)
    if name not in losses.LOSSES or cls is None:
        raise ValueError(f"unknown loss {name!r}: expected one of {losses.LOSSES}.")
    kwargs = dict(loss_args or {})
    if "num_classes" in inspect.signature(cls).parameters:
        kwargs.setdefault("num_classes", num_classes)
    return cls(**kwargs)


def add_protocol_arguments(parser):
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--classes-per-batch", type=int, default=32)
    parser.add_argument("--samples-per-class", type=int, default=4)
    parser.add_argument("--data", default=None, help="folder with the Omniglot npz files")
    parser.add_argument("--threads", type=int, default=2,
                        help="intra-op threads (the same for both frameworks)")
    parser.add_argument("--out", default=None, help="append the result as a JSON line here")
    return parser


def set_threads(threads):
    """TensorFlow's intra-op threads (inter-op 1); only possible before TensorFlow
    starts, so a process that already ran TensorFlow keeps its setting (with a note)."""
    import tensorflow as tf

    if tf.config.threading.get_intra_op_parallelism_threads() == threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        print(f"note: TensorFlow already started in this process; --threads {threads} "
              "is not applied", file=sys.stderr)


def machine():
    """The CPU (`benchmarks.__main__.cpu_model`: model and widest vector instructions) and
    the 1-minute load average, recorded with every result."""
    if _ROOT not in sys.path:
        sys.path.append(_ROOT)
    from benchmarks.__main__ import cpu_model

    return {"cpu": cpu_model(), "load": os.getloadavg()[0]}


def append_result(path, row):
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def main(argv=None):
    parser = add_protocol_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--loss", default="InstanceCrossEntropy")
    parser.add_argument("--loss-args", default="{}", help="JSON constructor arguments")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--schedule", choices=("constant", "cosine"), default="constant")
    parser.add_argument("--weight-decay", type=float, default=0.0,
                        help="AdamW's decoupled weight decay (default 0: Adam)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--augment-shift", type=float, default=0.0, help="pixels")
    parser.add_argument("--augment-rotation", type=float, default=0.0, help="degrees")
    parser.add_argument("--augment-scale", type=float, default=0.0, help="zoom fraction")
    parser.add_argument("--rotated-classes", action="store_true",
                        help="also train on 90/180/270-degree rotations as new characters")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--tag", default="", help="a free label stored with the result")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    loss_args = json.loads(args.loss_args)
    started = time.time()
    result = run_protocol(
        make_loss(args.loss, loss_args, 964 * (4 if args.rotated_classes else 1)),
        steps=args.steps, seed=args.seed,
        classes_per_batch=args.classes_per_batch, samples_per_class=args.samples_per_class,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        schedule=args.schedule, weight_decay=args.weight_decay, dim=args.dim,
        augment_shift=args.augment_shift, augment_rotation=args.augment_rotation,
        augment_scale=args.augment_scale, rotated_classes=args.rotated_classes,
        eval_every=args.eval_every, data_dir=args.data)
    row = {"system": "keras_dml", "loss": args.loss, "loss_args": loss_args, "tag": args.tag,
           **{k: v for k, v in vars(args).items() if k not in ("loss", "loss_args", "out")},
           **result, "wall_seconds": time.time() - started, **machine()}
    print(json.dumps(row), flush=True)
    append_result(args.out, row)
    return row


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
