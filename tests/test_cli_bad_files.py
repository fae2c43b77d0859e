"""One rule for bad image files on every command that reads images: without
--skip-bad-images the command stops naming the file; with it each bad file is named,
left out and reported, and the command goes on (`index --uri`: tests/test_index_streaming.py).
TensorFlow's C++ log stays off the terminal."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import cli
from keras_dml.cli.arguments import report_skipped
from keras_dml.data.image_errors import skipped_sentence
from test_index_catalogue import CLASSES, _png, run_dir  # noqa: F401 (fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A truncated JPEG, a zero-byte file, a text file named .jpg and a broken symlink.
BAD = ("truncated.jpg", "empty.jpg", "text.jpg", "broken_link.jpg")


def _jpeg(seed):
    image = np.random.default_rng(seed).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(image).numpy()


def _bad_files(folder):
    """The four bad files of `BAD` in `folder`; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "truncated.jpg").write_bytes(_jpeg(0)[:400])
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("not an image, whatever its name says")
    os.symlink(folder / "no_such_file.jpg", folder / "broken_link.jpg")
    return [str(folder / name) for name in BAD]


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """root/<class>/<image>.png (3 classes x 3) with the four bad files in class cat."""
    root = tmp_path_factory.mktemp("shop")
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(3):
            _png(root / name / f"{i}.png", colour, 10 * number + i)
    _bad_files(root / "cat")
    return root


def test_a_skipped_file_reads_as_a_sentence(capsys):
    assert skipped_sentence("/shop/a.jpg", "missing") == "skipped /shop/a.jpg: no such file"
    assert skipped_sentence("/shop/b.jpg", "cannot be decoded") == (
        "skipped /shop/b.jpg: not a decodable image")
    report_skipped([("/shop/a.jpg", "missing"), ("/shop/b.jpg", "cannot be decoded")])
    assert capsys.readouterr().err.splitlines() == [
        "left out 2 unreadable image file(s) (--skip-bad-images):",
        "  skipped /shop/a.jpg: no such file",
        "  skipped /shop/b.jpg: not a decodable image"]


def _commands(run_dir, shop, out):  # noqa: F811
    return {
        "embed": ["embed", run_dir, shop, "--output", out / "e.npz"],
        "evaluate": ["evaluate", run_dir, "--images", shop, "--output", out / "eval",
                     "--no-report"],
        "index --output": ["index", run_dir, "--images", shop, "--output", out / "index"],
        "calibrate": ["calibrate", run_dir, "--images", shop, "--target-far", "0.5",
                      "--no-plots"],
    }


@pytest.mark.slow  # every command twice
def test_every_command_stops_or_skips_the_same_way(run_dir, shop, tmp_path,  # noqa: F811
                                                   capfd):
    for skip in (False, True):
        out = tmp_path / ("skip" if skip else "strict")
        for what, argv in _commands(run_dir, shop, out).items():
            code = cli.main([str(a) for a in argv] + ["--skip-bad-images"] * skip)
            err = capfd.readouterr().err
            command = argv[0]
            if not skip:
                assert code == 2, (what, err)
                assert f"keras-dml {command}: error: keras_dml.data: cannot read or decode" \
                    in err and "--skip-bad-images" in err, (what, err)
                continue
            assert code == 0, (what, err)
            for name in BAD:  # named as met, then in the closing list with its reason
                assert err.count(f"/cat/{name}: ") == 2, (what, name, err)
            assert "left out 4 unreadable image file(s) (--skip-bad-images):" in err, err
            assert f"skipped {shop / 'cat' / 'broken_link.jpg'}: no such file" in err, err
    assert np.load(tmp_path / "skip" / "e.npz")["embeddings"].shape[0] == 9
    # search answers every readable query of a folder, naming the others
    code = cli.main(["search", str(tmp_path / "skip" / "index"), str(shop / "cat")])
    out, err = capfd.readouterr()
    assert code == 1 and out.count("  1. ") == 3
    assert all(name in err for name in BAD), err


def _run_cli(*argv, env_level=None):
    """`python -m keras_dml.cli ...` in a fresh process, as from a terminal."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if env_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = env_level
    return subprocess.run([sys.executable, "-m", "keras_dml.cli", *map(str, argv)],
                          capture_output=True, text=True, env=env, timeout=600)


def test_python_m_keras_dml_cli_is_the_command_process():
    # As the console script: TensorFlow loads later, quietly, with its log set
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "keras_dml.cli",
                             "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "keras_dml.cli" in imported and not {"tensorflow", "keras"} & imported


@pytest.mark.slow  # two fresh processes importing TensorFlow
def test_tensorflow_log_lines_stay_off_the_terminal(run_dir, tmp_path):  # noqa: F811
    folder = tmp_path / "photos" / "cat"
    _png(folder / "0.png", CLASSES["cat"], 0)
    whole = _jpeg(1)
    (folder / "truncated.jpg").write_bytes(whole[:len(whole) // 2])  # cut in the image data
    strict = _run_cli("embed", run_dir, folder.parent, "--output", tmp_path / "a.npz")
    assert strict.returncode == 2
    lines = strict.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "keras-dml embed: error: keras_dml.data: cannot read or decode image 1 "), lines
    assert "truncated.jpg" in lines[0]
    # TF_CPP_MIN_LOG_LEVEL=2 (a common setting) hides INFO and WARNING, not ERROR lines
    skipping = _run_cli("embed", run_dir, folder.parent, "--output", tmp_path / "b.npz",
                        "--skip-bad-images", env_level="2")
    assert skipping.returncode == 0, skipping.stderr
    assert "Premature end of JPEG" not in skipping.stderr
    assert not [line for line in skipping.stderr.splitlines() if line[:1] in "IWE"
                and line[1:5] == "0000"], skipping.stderr
    assert f"keras_dml.data: skipped {folder / 'truncated.jpg'}: cannot be read or decoded" \
        in skipping.stderr
    assert f"  skipped {folder / 'truncated.jpg'}: not a decodable image" in skipping.stderr


@pytest.mark.slow  # two tiny training runs
def test_train_stops_or_skips_bad_test_images_and_lists_their_paths(shop, tmp_path, capfd):
    clean = tmp_path / "clean"
    for number, name in enumerate(("ant", "bee", "cow")):
        for i in range(3):
            _png(clean / name / f"{i}.png", (60 * number, 90, 200 - 60 * number), 50 + i)
    args = ["train", "--data-dir", str(clean), "--test-dir", str(shop), "--epochs", "1",
            "--steps-per-epoch", "1", "--classes-per-batch", "2", "--samples-per-class", "2",
            "--image-size", "16", "--backbone", "convnet", "--no-export", "--no-plots",
            "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(args + ["--run-name", "strict"]) == 2
    assert "keras-dml train: error: keras_dml.data: cannot read or decode" in \
        capfd.readouterr().err
    assert cli.main(args + ["--run-name", "skip", "--skip-bad-images"]) == 0
    out, err = capfd.readouterr()
    bad = [str(shop / "cat" / name) for name in sorted(BAD)]
    summary = json.load(open(tmp_path / "runs" / "skip" / "summary.json"))
    assert sorted(summary["skipped_images"]) == bad
    assert summary["skipped_reasons"] == {path: "missing" if "broken" in path
                                          else "cannot be decoded" for path in bad}
    assert all(f"keras_dml.data: skipped {path}: " in err for path in bad), err
    assert "left out 4 unreadable image file(s) (--skip-bad-images; summary.json" in out
