"""Every registered loss's value and gradient on one Keras backend, for comparing backends.

    KERAS_BACKEND=jax python tests/backend_values.py write OUT.npz
    python tests/backend_values.py compare DIR     # DIR holds tensorflow.npz, jax.npz, ...

`write` computes, on the backend of this process, each loss's value and d value / d
embeddings on the same NumPy batch (the registry example, seeded proxies, float32) and
saves them, with the error of a loss that fails, to OUT.npz. `compare` prints, per loss,
each backend's largest relative difference from TensorFlow's (test_backend_equality.py
asserts them).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BACKENDS = ("tensorflow", "jax", "torch")
SEED = 11


def write(path):
    import keras
    import numpy as np

    import backend_checks as checks

    keras.utils.set_random_seed(0)
    arrays = {}
    for name in checks.NAMES:
        labels, x = checks.batch(name, seed=SEED)
        try:
            value, gradient = checks.value_and_gradient(checks.make(name), labels, x)
        except Exception as error:  # recorded per loss: the comparison names it
            arrays[f"{name}/error"] = np.array(f"{type(error).__name__}: {error}"[:500])
            continue
        arrays[f"{name}/value"] = np.float32(value)
        arrays[f"{name}/gradient"] = gradient.astype("float32")
    np.savez(path, **arrays)


def relative_differences(ours, theirs, name):
    """(value, gradient) relative differences of `ours` from `theirs` (loaded .npz), or
    the error message of whichever side failed.

    The gradient's is max |g - g_ref| / max |g_ref|: relative to its largest entry, as
    float32 rounding is relative to the largest terms of a sum, not to each entry.
    """
    for side in (ours, theirs):
        if f"{name}/error" in side:
            return str(side[f"{name}/error"])
    value, reference = float(ours[f"{name}/value"]), float(theirs[f"{name}/value"])
    gradient, reference_gradient = ours[f"{name}/gradient"], theirs[f"{name}/gradient"]
    value_difference = abs(value - reference) / max(abs(reference), 1e-30)
    scale = max(float(abs(reference_gradient).max()), 1e-30)
    return value_difference, float(abs(gradient - reference_gradient).max()) / scale


def compare(directory):
    import numpy as np

    loaded = {backend: np.load(os.path.join(directory, f"{backend}.npz"))
              for backend in BACKENDS if os.path.exists(os.path.join(directory, f"{backend}.npz"))}
    names = sorted({key.split("/")[0] for data in loaded.values() for key in data.files})
    others = [backend for backend in loaded if backend != "tensorflow"]
    print("loss".ljust(28) + "".join(f"{b + ' value':>16}{b + ' grad':>16}" for b in others))
    for name in names:
        row = name.ljust(28)
        for backend in others:
            result = relative_differences(loaded[backend], loaded["tensorflow"], name)
            row += (f"{result[0]:16.1e}{result[1]:16.1e}" if isinstance(result, tuple)
                    else f"{'error: ' + result[:25]:>32}")
        print(row)


if __name__ == "__main__":
    command, path = sys.argv[1:3]
    {"write": write, "compare": compare}[command](path)
