"""`keras-dml index --uri`: a folder of images streamed into Milvus Lite in chunks, resumed
after a kill, updated, and searched from the URI (a real Milvus Lite database, no mock)."""

import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_dml import cli
from keras_dml.index import Index
from keras_dml.index import safeguards
from keras_dml.index.catalogue import Catalogue, list_images
from keras_dml.index.streaming import sync
from keras_dml.inference import Embedded
from test_index_catalogue import CLASSES, _main, _png, run_dir  # noqa: F401 (fixture)

pytest.importorskip("pymilvus")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def photos(tmp_path):
    """root/<class>/<image>.png, 3 classes x 3, changed by the tests."""
    root = tmp_path / "photos"
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(3):
            _png(root / name / f"{i}.png", colour, 10 * number + i)
    return root


def _summary(out):
    return re.search(r"added (\d+) images.*?, (\d+) already there(.*); (\d+) items", out).groups()


def test_index_uri_searches_like_the_saved_index_and_updates(photos, run_dir, tmp_path,  # noqa: F811
                                                            capsys):
    uri = str(tmp_path / "catalogue.db")
    out = _main(["index", run_dir, "--images", photos, "--uri", uri, "--chunk-size", "4"],
                capsys)
    assert _summary(out) == ("9", "0", "", "9")
    index = Index.open(uri)
    assert sorted(index.ids) == sorted(list_images(photos).ids)
    assert index.provenance["run"] == str(run_dir) and index.provenance["dim"] == 6
    _main(["index", run_dir, "--images", photos, "--output", tmp_path / "saved"], capsys)

    query = photos / "dog" / "1.png"
    on_milvus = _main(["search", uri, query, "--k", "4"], capsys)
    saved = _main(["search", tmp_path / "saved", query, "--k", "4"], capsys)
    rows = [re.findall(r"^\s+\d\. (\S+)\s+label (\S+)\s+score ([\d.]+)", out, re.M)
            for out in (on_milvus, saved)]
    assert rows[0] == rows[1] and rows[0][0] == ("dog/1.png", "dog", "1.0000")
    only_cats = _main(["search", uri, query, "--k", "5", "--label", "cat"], capsys)
    assert re.findall(r"label (\S+)", only_cats) == ["cat"] * 3  # 3 cats: fewer than --k
    assert cli.main(["search", uri, str(query), "--label", "kat"]) == 2  # a typo: no item
    assert capsys.readouterr().err.strip().splitlines() == [
        f"keras-dml search: error: No item in {uri} has --label kat: nothing to search."]

    # The same command again stores nothing twice; --update follows the folder's changes.
    assert _summary(_main(["index", run_dir, "--images", photos, "--uri", uri], capsys)) == (
        "0", "9", "", "9")
    os.remove(photos / "cat" / "0.png")
    _png(photos / "cat" / "7.png", CLASSES["cat"], 70)
    (photos / "owl" / "bad.png").write_text("<html>not an image</html>")
    # The one bad-image rule: stop, naming the file and the way out ...
    assert cli.main(["index", str(run_dir), "--images", str(photos), "--uri", uri]) == 2
    err = capsys.readouterr().err
    assert re.search(r"cannot read or decode image \d+ '.*owl/bad.png'.*--skip-bad-images",
                     err), err
    assert "function_node" not in err and err.count("\n") == 1
    # ... unless asked to skip: then it is named, left out, and tried again next time.
    code = cli.main(["index", str(run_dir), "--images", str(photos), "--uri", uri,
                     "--skip-bad-images"])
    out, err = capsys.readouterr()
    assert code == 0 and _summary(out) == (
        "1", "8", "; 1 entries' files are gone (--update removes them)", "10")
    assert re.search(r"skipped .*owl/bad.png \(cannot be decoded\)", err)
    assert "function_node" not in err
    os.remove(photos / "owl" / "bad.png")
    out = _main(["index", run_dir, "--images", photos, "--uri", uri, "--update"], capsys)
    assert _summary(out) == ("0", "9", ", removed 1 whose files are gone", "9")
    assert sorted(Index.open(uri).ids) == sorted(list_images(photos).ids)


def test_index_uri_refuses_another_model_and_bad_places(photos, run_dir, tmp_path,  # noqa: F811
                                                       capsys):
    uri = str(tmp_path / "catalogue.db")
    _main(["index", run_dir, "--images", photos, "--uri", uri], capsys)
    retrained = tmp_path / "retrained"
    shutil.copytree(run_dir, retrained)
    model = keras.saving.load_model(retrained / "model.keras")
    model.set_weights([w + 0.1 for w in model.get_weights()])
    model.save(retrained / "model.keras")
    assert cli.main(["index", str(retrained), "--images", str(photos), "--uri", uri]) == 2
    err = capsys.readouterr().err
    assert re.search(r"model sha256:[0-9a-f]{16} \(run .*\), but the model at hand is "
                     rf"sha256:[0-9a-f]{{16}} \(run {retrained}\)", err), err
    assert err.count("\n") == 1

    query = str(photos / "dog" / "0.png")
    started = time.perf_counter()
    assert cli.main(["search", "http://127.0.0.1:9", query]) == 2  # a closed port
    assert "Cannot reach Milvus at http://127.0.0.1:9" in capsys.readouterr().err
    assert time.perf_counter() - started < 30  # a hang guard: an error, not a wait
    (tmp_path / "notes.db").write_text("not a database")
    assert cli.main(["index", str(run_dir), "--images", str(photos), "--uri",
                     str(tmp_path / "notes.db")]) == 2
    assert "notes.db is not a Milvus Lite database: it is a file" in capsys.readouterr().err
    assert cli.main(["search", str(tmp_path / "nothing"), query]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["index", str(run_dir), "--images", str(photos), "--uri",
                     str(tmp_path / "catalogue")]) == 2
    assert "a Milvus Lite database is a path ending in .db" in capsys.readouterr().err

    # Another process holds a Lite database (its lock): one clear line, no wait.
    held = tmp_path / "held.db"
    holder = subprocess.Popen([sys.executable, "-c", "import time; from pymilvus import "
                               f"MilvusClient; c = MilvusClient({str(held)!r}); "
                               "print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli.main(["search", str(held), query]) == 2
        err = capsys.readouterr().err
        assert f"{held} is open in another process" in err and err.count("\n") == 1
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_killed_indexing_run_resumes_without_duplicate_or_loss(run_dir, tmp_path):  # noqa: F811
    """SIGKILL once the first chunks are stored; the same command then stores exactly the
    rest: every file once."""
    folder = tmp_path / "many"
    for i in range(600):
        name = list(CLASSES)[i % 3]
        _png(folder / name / f"{i:04d}.png", CLASSES[name], i)
    uri = tmp_path / "catalogue.db"
    command = [sys.executable, "-m", "keras_dml.cli", "index", str(run_dir), "--images",
               str(folder), "--uri", str(uri), "--chunk-size", "8"]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.poll() is None:
        wal = [os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(uri)
               for name in names if name.startswith("wal_data")]
        if sum(wal) > 20_000:  # a few chunks in the write-ahead log
            break
        time.sleep(0.05)
    assert job.poll() is None, job.communicate()[1].decode()[-2000:]
    job.send_signal(signal.SIGKILL)
    job.wait()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    added, kept, _, total = _summary(done.stdout)
    assert 0 < int(kept) < 600 and int(added) + int(kept) == 600 and total == "600"
    ids = Index.open(str(uri)).ids
    assert len(ids) == 600 and sorted(ids) == sorted(list_images(folder).ids)


@contextlib.contextmanager
def milvus_server(data_dir):
    """`milvus-lite server` on a free loopback port, serving `data_dir`: yields its URI."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir",
                               str(data_dir), "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "listening" in server.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


@pytest.mark.slow
def test_the_same_commands_on_a_server_uri(photos, run_dir, tmp_path, capsys):  # noqa: F811
    """`milvus-lite server` serves a database over Milvus' gRPC API: the http:// road of
    `--uri` (the one a Milvus server or cluster takes), with a second client connected."""
    with milvus_server(tmp_path / "served.db") as uri:
        out = _main(["index", run_dir, "--images", photos, "--uri", uri], capsys)
        assert _summary(out) == ("9", "0", "", "9")
        other = Index.open(uri)  # a second client while the CLI searches
        out = _main(["search", uri, photos / "owl" / "1.png", "--k", "2"], capsys)
        assert re.search(r"^\s+1\. owl/1.png\s+label owl\s+score 1.0000", out, re.M)
        assert len(other) == 9
        other.close()


# -- sync's safeguards, from Python (a Milvus Lite file in this process, no model) ---------

def _catalogue(root, ids):
    """A catalogue of `ids` below `root`, labelled by their first folder."""
    root = str(root)
    return Catalogue(root, [os.path.join(root, i) for i in ids], list(ids),
                     [i.split("/")[0] for i in ids])


def _vectors(paths, chunk_size):
    """`embed_chunks` without a model: one arbitrary 4-d vector per path."""
    for start in range(0, len(paths), chunk_size):
        part = paths[start:start + chunk_size]
        yield Embedded(np.random.default_rng(start).random((len(part), 4), np.float32),
                       paths=part)


def _nothing_embedded(paths, chunk_size):
    assert not paths, f"embedded {paths}"
    yield from ()


def test_sync_refuses_another_root_or_layout_and_removals_over_the_bound(tmp_path):
    ids = [f"{shelf}/{n}.png" for shelf in "abcdefghij" for n in range(2)]  # 10 classes x 2
    root = tmp_path / "shop" / "catalogue"
    index = Index("cosine", "milvus", uri=str(tmp_path / "items.db"))
    try:
        assert sync(index, _catalogue(root, ids), _vectors, 8).added == 20
        assert index.info["catalogue"] == {"root": str(root), "ids": "relative_path"}

        # A half-synced folder (1 class of 10): refused, nothing changed; a dry run shows it.
        half = _catalogue(root, ids[:2])
        with pytest.raises(ValueError, match=re.escape(
                "update=True would remove 18 of the 20 items (90 %): their files are not "
                f"among the 2 listed under {root}, and the bound is 2 (max_removals=10%). "
                "Nothing was changed.")) as refused:
            sync(index, half, _nothing_embedded, update=True)
        assert "dry_run=True" in str(refused.value) and "max_removals=18" in str(refused.value)
        assert len(index) == 20
        dry = sync(index, half, _nothing_embedded, update=True, dry_run=True)
        assert (dry.dry_run, dry.kept, dry.to_add, dry.to_remove) == (True, 2, [], ids[2:])
        assert dry.refusal == str(refused.value) and len(index) == 20
        allowed = sync(index, half, _nothing_embedded, update=True, dry_run=True,
                       max_removals=18)
        assert allowed.refusal is None and len(allowed.to_remove) == 18

        # The same photos through the parent folder: other ids, refused (dry run too).
        parent = _catalogue(root.parent, [f"catalogue/{i}" for i in ids])
        for dry_run in (False, True):
            with pytest.raises(ValueError, match=re.escape(
                    f"The collection holds the catalogue of {root}, and these images are "
                    f"listed from {root.parent}")):
                sync(index, parent, _nothing_embedded, dry_run=dry_run)
        by_sku = _catalogue(root, ids)
        by_sku.id_layout = "column:sku"
        with pytest.raises(ValueError, match="paths relative to the catalogue folder, but "
                           "these images' ids are the CSV column 'sku'"):
            sync(index, by_sku, _nothing_embedded)
        assert len(index) == 20 and index.info["catalogue"]["root"] == str(root)

        # Within the bound: the removed items are written first, to a new file only.
        kept = _catalogue(root, ids[1:] + ["k/0.png"])
        removals = tmp_path / "removals.jsonl"
        report = sync(index, kept, _vectors, update=True, removals_file=str(removals))
        assert (report.added, report.removed, report.removals_file) == (1, 1, str(removals))
        assert [json.loads(line) for line in removals.read_text().splitlines()] == [
            {"id": "a/0.png", "label": "a", "metadata": {"path": "a/0.png"},
             "path": str(root / "a" / "0.png")}]
        with pytest.raises(FileExistsError, match="never overwritten"):
            sync(index, _catalogue(root, ids[2:]), _nothing_embedded, update=True,
                 removals_file=str(removals))
        assert len(index) == 20 and removals.read_text().count("\n") == 1

        # A moved root with the same layout is re-recorded when asked; a parent is not.
        moved = tmp_path / "mnt" / "catalogue"
        with pytest.raises(ValueError, match="pass move_root=True"):
            sync(index, _catalogue(moved, kept.ids), _nothing_embedded)
        report = sync(index, _catalogue(moved, kept.ids), _nothing_embedded, move_root=True)
        assert (report.kept, report.added) == (20, 0)
        assert index.info["catalogue"] == {"root": str(moved), "ids": "relative_path"}
        with pytest.raises(ValueError, match=re.escape(
                f"Moving the catalogue root to {moved.parent} would leave 20 of the 20 items "
                "(100 %) without a file")):
            sync(index, _catalogue(moved.parent, [f"catalogue/{i}" for i in kept.ids]),
                 _nothing_embedded, move_root=True)
        assert index.info["catalogue"]["root"] == str(moved)
    finally:
        index.close()


def test_a_collection_that_recorded_only_its_root_is_checked_too(tmp_path):
    index = Index("cosine", "milvus", uri=str(tmp_path / "items.db"),
                  info={"images": str(tmp_path / "old"), "root": str(tmp_path / "old")})
    try:
        sync(index, _catalogue(tmp_path / "old", ["a/0.png"]), _vectors)
        assert index.info == {"images": str(tmp_path / "old"), "catalogue": {
            "root": str(tmp_path / "old"), "ids": "relative_path"}}
        index.info = {"root": str(tmp_path / "old")}  # as recorded before the layout was
        with pytest.raises(ValueError, match="holds the catalogue of .*old, and these "):
            sync(index, _catalogue(tmp_path / "new", ["a/0.png"]), _nothing_embedded)
    finally:
        index.close()


@pytest.mark.parametrize(("bound", "size", "most"), [
    ("10%", 9, 1), ("10%", 20, 2), ("10%", 0, 0), ("0", 5, 0), (7, 5, 7), ("100%", 5, 5),
    (" 25 % ", 10, 3), (None, 5, None)])
def test_removal_bound(bound, size, most):
    assert safeguards.removal_bound(bound, size) == most


@pytest.mark.parametrize("bound", ["ten", "-1", "150%", "%", 0.1, "1.5"])
def test_a_bad_removal_bound_is_named(bound):
    with pytest.raises(ValueError, match=re.escape(f"max_removals must be a count of items "
                                                   f"(e.g. 50) or a percentage of them (e.g. "
                                                   f"10%, at most 100%), got {bound!r}.")):
        safeguards.parse_max_removals(bound)


def test_new_removals_files_never_reuse_a_name(tmp_path):
    now = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    first = safeguards.new_removals_file(str(tmp_path), "shop", now)
    assert first == str(tmp_path / "20300102T030405Z-shop.jsonl")
    open(first, "w").close()
    assert safeguards.new_removals_file(str(tmp_path), "shop", now) == str(
        tmp_path / "20300102T030405Z-shop-2.jsonl")


def test_waiting_for_a_lite_file_says_so_and_names_the_server_road(tmp_path, capsys):
    from keras_dml.index.lite_process import LiteProcess

    class Enough(Exception):
        pass

    looks = [True, True]

    def locked(path):  # held for two looks; the third ends the test before a child starts
        if looks:
            return looks.pop()
        raise Enough

    with pytest.raises(Enough):
        LiteProcess(tmp_path / "shop.db", locked)
    err = capsys.readouterr().err
    assert err == (f"keras_dml: {tmp_path / 'shop.db'} is open in another process; waiting up "
                   "to 10 s for it. Milvus Lite opens a database in one process at a time: to "
                   "search a catalogue while it is updated, serve it (milvus-lite server "
                   f"--data-dir {tmp_path / 'shop.db'} --port 19530) and give every command "
                   "--uri http://127.0.0.1:19530.\n")
