"""SimCLR-style training on Omniglot without labels: NT-Xent on two augmented views.

The Omniglot protocol's data, CNN, optimiser and evaluation
(`examples/omniglot_protocol.py`: 964 background characters train, 659 evaluation
characters test leave-one-out, 28 x 28 ink = 1, 3-block CNN + dense 128, Adam 1e-3),
but no class labels: `keras_dml.data.two_view_batches` draws `--instances` training
images per step and augments each twice (random shift, rotation and zoom), labels are
instance ids, and `keras_dml.losses.NTXent` pulls the two views of an image together
against every other image in the batch. The same network, untrained (same seed), is
the baseline.

    python examples/simclr_omniglot.py --steps 300 --instances 64
"""

import argparse
import json
import os
import sys
import time

import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import omniglot_protocol as protocol  # noqa: E402

from keras_dml.data import two_view_batches  # noqa: E402
from keras_dml.losses import NTXent  # noqa: E402


def augmentation(seed):
    fill = {"fill_mode": "constant", "seed": seed}
    return keras.Sequential([keras.layers.RandomTranslation(0.15, 0.15, **fill),
                             keras.layers.RandomRotation(0.05, **fill),
                             keras.layers.RandomZoom(0.15, **fill)])


def run(steps, instances, temperature, seed, data_dir=None):
    x_train, _, x_test, y_test = protocol.load_data(data_dir)
    keras.utils.set_random_seed(seed)
    model = protocol.build_cnn()
    untrained = protocol.metrics_from_embeddings(
        model.predict(x_test, batch_size=1024, verbose=0), y_test)
    model.compile(keras.optimizers.Adam(1e-3), loss=NTXent(temperature), jit_compile=False)
    batches = two_view_batches(x_train, augmentation(seed), instances, seed=seed)
    start = time.perf_counter()
    model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    trained = protocol.metrics_from_embeddings(
        model.predict(x_test, batch_size=1024, verbose=0), y_test)
    return {"steps": steps, "instances": instances, "temperature": temperature,
            "untrained": untrained, "trained": trained, "train_seconds": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--instances", type=int, default=64, help="images per step (x 2 views)")
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    protocol.set_threads(args.threads)
    result = run(args.steps, args.instances, args.temperature, args.seed, args.data)
    print(json.dumps(result))
    before, after = result["untrained"], result["trained"]
    print(f"untrained: R@1 {before['R@1']:.1f}  MAP@R {before['MAP@R']:.1f}\n"
          f"NT-Xent, no labels, {args.steps} steps: R@1 {after['R@1']:.1f}  "
          f"MAP@R {after['MAP@R']:.1f}")


if __name__ == "__main__":
    main()
