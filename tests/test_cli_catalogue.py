"""`keras-dml index --uri` keeps a catalogue whole: another root is refused, an update that
would remove more than --max-removals is refused, --dry-run changes nothing, the removed
items are written beside the run; on a Milvus Lite file and through a server URI."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_dml import cli
from keras_dml.index import Index
from milvus_servers import standalone, standalone_uri  # noqa: F401 (fixture)
from test_index_catalogue import _main, run_dir  # noqa: F401 (fixture)
from test_index_streaming import ROOT, _summary, milvus_server, photos  # noqa: F401

pytest.importorskip("pymilvus")

# Each command on a Lite file starts its serving process (seconds): the quick tier checks
# sync's safeguards on a Lite file from Python (tests/test_index_streaming.py).
# "standalone": a Milvus standalone (pip install milvus), one for the module.
STORES = [pytest.param("lite", marks=pytest.mark.slow),
          pytest.param("server", marks=pytest.mark.slow),
          pytest.param("standalone", marks=[pytest.mark.slow, pytest.mark.requires("milvus")])]


@contextlib.contextmanager
def _store(kind, tmp_path, request):
    """The --uri of a Milvus Lite file, of a `milvus-lite server` on a free port, or of
    the module's Milvus standalone."""
    if kind == "lite":
        yield str(tmp_path / "catalogue.db")
    elif kind == "standalone":
        with standalone_uri(request) as uri:
            yield uri
    else:
        with milvus_server(tmp_path / "served.db") as uri:
            yield uri


def _count(uri):
    with Index.open(uri) as index:
        return len(index)


def _refused(argv, capsys):
    assert cli.main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1, (out, err)
    return err


@pytest.mark.parametrize("store", STORES)
def test_a_half_synced_folder_is_refused_and_removals_are_kept(store, photos, run_dir,  # noqa: F811
                                                              tmp_path, capsys, request):
    with _store(store, tmp_path, request) as uri:
        index = ["index", run_dir, "--images", photos, "--uri", uri]
        out = _main([*index, "--dry-run"], capsys)  # before the collection exists
        assert out.splitlines()[0] == (f"index (dry run): {uri}: would add 9 images, 0 already "
                                       "there; nothing was changed")
        assert out.splitlines()[1] == ("  would add: cat/0.png, cat/1.png, cat/2.png, dog/0.png, "
                                       "dog/1.png, dog/2.png, owl/0.png, owl/1.png, owl/2.png")
        if store == "lite":
            assert not os.path.exists(uri)
        assert _summary(_main(index, capsys)) == ("9", "0", "", "9")
        before = set(_removal_files(run_dir))

        # A half-synced mount: 1 class folder of 3 is there. Refused, the catalogue intact.
        away = tmp_path / "away"
        for name in ("dog", "owl"):
            shutil.move(photos / name, away / name)
        err = _refused([*index, "--update"], capsys)
        assert err == (f"keras-dml index: error: --update would remove 6 of the 9 items (67 %): "
                       f"their files are not among the 3 listed under {photos}, and the bound "
                       "is 1 (--max-removals=10%). Nothing was changed. A folder only partly "
                       "synced or mounted elsewhere looks like this: see which items with "
                       "--dry-run; if their files are really gone, pass --max-removals=6 (or "
                       "100%).\n")
        assert _count(uri) == 9
        out = _main([*index, "--update", "--dry-run"], capsys)
        assert out.splitlines()[:2] == [
            f"index (dry run): {uri}: would add 0 images, 3 already there, would remove 6 whose "
            "files are gone; nothing was changed",
            "  would remove: dog/0.png, dog/1.png, dog/2.png, owl/0.png, owl/1.png, owl/2.png"]
        assert "without --dry-run the command is refused: --update would remove 6" in out
        assert _count(uri) == 9 and set(_removal_files(run_dir)) == before

        # Within the bound: one file is gone; the removed item is written beside the run.
        for name in ("dog", "owl"):
            shutil.move(away / name, photos / name)
        os.remove(photos / "cat" / "0.png")
        out = _main([*index, "--update"], capsys)
        assert _summary(out) == ("0", "8", ", removed 1 whose files are gone", "8")
        written = set(_removal_files(run_dir)) - before
        assert len(written) == 1
        path = written.pop()
        assert (f"index: the removed items are listed in {path} (one JSON line each: id, "
                "label, metadata, path), to put them back") in out
        assert [json.loads(line) for line in open(path)] == [
            {"id": "cat/0.png", "label": "cat", "metadata": {"path": "cat/0.png"},
             "path": str(photos / "cat" / "0.png")}]
        assert _count(uri) == 8


def _removal_files(run):
    folder = run / "index_removals"
    return sorted(str(folder / name) for name in os.listdir(folder)) if folder.exists() else []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*skipped .* entries")  # the database folder
@pytest.mark.parametrize("store", STORES)
def test_another_root_is_refused_and_a_moved_one_recorded(store, photos, run_dir,  # noqa: F811
                                                          tmp_path, capsys, request):
    """The same photos through their parent folder would be stored twice: refused, with or
    without --update; the folder moved with the same layout: --move-root records it."""
    with _store(store, tmp_path, request) as uri:
        _main(["index", run_dir, "--images", photos, "--uri", uri], capsys)
        for extra in ([], ["--update"], ["--dry-run"]):
            err = _refused(["index", run_dir, "--images", tmp_path, "--uri", uri, *extra], capsys)
            assert err.startswith(f"keras-dml index: error: The collection holds the catalogue "
                                  f"of {photos}, and these images are listed from {tmp_path}: ")
            assert "pass --move-root" in err and "(--collection=NAME)" in err
        moved = tmp_path / "mnt" / "photos"
        shutil.copytree(photos, moved)
        _refused(["index", run_dir, "--images", moved, "--uri", uri], capsys)
        out = _main(["index", run_dir, "--images", moved, "--uri", uri, "--move-root"], capsys)
        assert _summary(out) == ("0", "9", "", "9")
        with Index.open(uri) as index:
            assert index.info["catalogue"] == {"root": str(moved), "ids": "relative_path"}
            assert len(index) == 9
        err = _refused(["index", run_dir, "--images", moved.parent, "--uri", uri, "--move-root"],
                       capsys)
        assert f"Moving the catalogue root to {moved.parent} would leave 9 of the 9 items" in err
        out = _main(["index", run_dir, "--images", moved, "--uri", uri, "--update"], capsys)
        assert _summary(out) == ("0", "9", "", "9")


def test_the_safety_flags_are_for_uri_and_checked(photos, run_dir, capsys):  # noqa: F811
    for flag in ("--dry-run", "--move-root"):
        err = _refused(["index", run_dir, "--images", photos, flag], capsys)
        assert err == f"keras-dml index: error: {flag} applies to a Milvus index: pass --uri.\n"
    with pytest.raises(SystemExit):
        cli.main(["index", str(run_dir), "--images", str(photos), "--uri", "x.db",
                  "--max-removals", "lots"])
    assert ("argument --max-removals: 'lots': give a count (e.g. 50) or a percentage (e.g. "
            "10%)") in capsys.readouterr().err


@pytest.mark.slow
def test_searches_answer_through_a_server_while_an_update_runs(run_dir, tmp_path,  # noqa: F811
                                                              capsys):
    """The documented road for a catalogue read while it is updated: `milvus-lite server`,
    every command on its http:// URI. A search every 0.2 s while `keras-dml index --update`
    runs in another process: every one answers; a plain pymilvus client searches without
    load() after keras_dml closed."""
    from pymilvus import MilvusClient

    from test_index_catalogue import CLASSES, _png

    folder = tmp_path / "shop"
    for i in range(300):
        name = list(CLASSES)[i % 3]
        _png(folder / name / f"{i:04d}.png", CLASSES[name], i)
    with milvus_server(tmp_path / "served.db") as uri:
        _main(["index", run_dir, "--images", folder, "--uri", uri], capsys)
        client = MilvusClient(uri=uri)
        query = client.get("keras_dml", ids=["cat/0000.png"], output_fields=["vector"])
        vector = np.asarray(query[0]["vector"], np.float32)
        for i in range(300, 900):
            name = list(CLASSES)[i % 3]
            _png(folder / name / f"{i:04d}.png", CLASSES[name], i)
        os.remove(folder / "cat" / "0003.png")
        env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
        update = subprocess.Popen(
            [sys.executable, "-m", "keras_dml.cli", "index", str(run_dir), "--images",
             str(folder), "--uri", uri, "--update", "--chunk-size", "32"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        answers, during = [], 0
        with Index.open(uri) as reader:
            while update.poll() is None:
                answers.append(reader.search(vector[None], k=3).ids[0, 0])
                during += update.poll() is None
                time.sleep(0.2)
        out, err = update.communicate()
        assert update.returncode == 0, err[-2000:]
        assert _summary(out) == ("600", "299", ", removed 1 whose files are gone", "899")
        assert during >= 5 and set(answers) == {"cat/0000.png"}
        hits = client.search("keras_dml", data=[vector.tolist()], limit=1)  # no load() first
        assert hits[0][0]["id"] == "cat/0000.png"
        assert client.query("keras_dml", filter="", output_fields=["count(*)"])[0][
            "count(*)"] == 899
        client.close()
