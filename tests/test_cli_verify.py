"""`keras-dml verify DIR|CSV`: every unreadable image in one pass."""

import os

import numpy as np
import tensorflow as tf

from keras_dml import cli


def _folder(root):
    rng = np.random.default_rng(0)
    for name in ("ant", "bee"):
        os.makedirs(root / name)
        for j in range(3):
            pixels = rng.integers(0, 255, (12, 12, 3), np.uint8)
            (root / name / f"{j}.jpg").write_bytes(tf.io.encode_jpeg(pixels).numpy())
    data = (root / "ant" / "0.jpg").read_bytes()
    (root / "ant" / "0.jpg").write_bytes(data[:len(data) // 3])
    (root / "bee" / "page.jpg").write_text("<html><body>not an image</body></html>")
    return root


def test_verify_lists_every_bad_file_of_a_folder_and_fails(tmp_path, capsys):
    root = _folder(tmp_path / "photos")
    assert cli.main(["verify", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"unreadable: {root / 'ant' / '0.jpg'} (cannot be decoded)" in out
    assert f"unreadable: {root / 'bee' / 'page.jpg'} (cannot be decoded)" in out
    assert "5 of 7 images read and decode; 2 unreadable" in out


def test_verify_names_a_missing_csv_row_and_passes_a_clean_list(tmp_path, capsys):
    root = _folder(tmp_path / "photos")
    rows = ["path,label", "photos/ant/1.jpg,ant", "photos/bee/0.jpg,bee", "photos/gone.jpg,bee"]
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    assert cli.main(["verify", str(tmp_path / "list.csv")]) == 1
    out = capsys.readouterr().out
    assert f"unreadable: {root / 'gone.jpg'} (missing)" in out and "2 of 3" in out
    (tmp_path / "clean.csv").write_text("\n".join(rows[:3]) + "\n")
    assert cli.main(["verify", str(tmp_path / "clean.csv")]) == 0
