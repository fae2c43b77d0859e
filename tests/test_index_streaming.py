"""`keras-dml index --uri`: a folder of images streamed into Milvus Lite in chunks, resumed
after a kill, updated, and searched from the URI (a real Milvus Lite database, no mock)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import pytest

from keras_dml import cli
from keras_dml.index import Index
from keras_dml.index.catalogue import list_images
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
    assert re.search(r"skipped .*owl/bad.png: not a decodable image", err)
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


@pytest.mark.slow
def test_the_same_commands_on_a_server_uri(photos, run_dir, tmp_path, capsys):  # noqa: F811
    """`milvus-lite server` serves a database over Milvus' gRPC API: the http:// road of
    `--uri` (the one a Milvus server or cluster takes), with a second client connected."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir",
                               str(tmp_path / "served.db"), "--host", "127.0.0.1", "--port",
                               str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        assert "listening" in server.stdout.readline()
        uri = f"http://127.0.0.1:{port}"
        out = _main(["index", run_dir, "--images", photos, "--uri", uri], capsys)
        assert _summary(out) == ("9", "0", "", "9")
        other = Index.open(uri)  # a second client while the CLI searches
        out = _main(["search", uri, photos / "owl" / "1.png", "--k", "2"], capsys)
        assert re.search(r"^\s+1\. owl/1.png\s+label owl\s+score 1.0000", out, re.M)
        assert len(other) == 9
        other.close()
    finally:
        server.kill()
        server.wait()
