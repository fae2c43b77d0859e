"""`keras-dml collections` (list, drop, alias) on a Milvus Lite file and a server URI;
`index` and `search` through an alias; the stale-model refusal naming the commands; and
a catalogue's switch to a retrained model, end to end from the command line."""

import json
import os
import re
import shutil

import keras
import numpy as np
import pytest

from keras_dml import cli
from keras_dml.index import Index, ModelMismatchError, model_fingerprint
from keras_dml.index.catalogue import list_images
from keras_dml.index.collections import Collections
from keras_dml.index.provenance import compare_export
from milvus_servers import standalone, standalone_uri  # noqa: F401 (fixture)
from test_index_catalogue import run_dir  # noqa: F401 (fixture)
from test_index_streaming import milvus_server, photos  # noqa: F401 (fixture)

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

A, B = "sha256:aaaaaaaaaaaaaaaa", "sha256:bbbbbbbbbbbbbbbb"


def _run(argv, capsys, code=0):
    """`keras-dml ARGV`: (stdout, stderr), the exit code checked."""
    result = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert result == code, err
    return out, err


def _fill(uri, name, fingerprint, n=10, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)
    with Index(backend="milvus", uri=uri, collection=name,
               provenance={"model_fingerprint": fingerprint, "run": f"/runs/{name}"}) as index:
        index.add(x, labels=np.arange(n) % 3)
    return x


@pytest.fixture(scope="module")
def made_once(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("made") / "shop.db")
    _fill(uri, "shop_v1", A)
    _fill(uri, "shop_v2", B, n=6, seed=1)
    with Collections(uri) as collections:
        collections._client.create_collection("foreign", dimension=4)
    return uri


@pytest.fixture()
def database(made_once, tmp_path):
    """A Lite file with two keras_dml collections (10 and 6 items) and a foreign one."""
    uri = str(tmp_path / "shop.db")
    shutil.copytree(made_once, uri)  # closed: a copy is the same database
    return uri


def test_list_names_each_collection_with_aliases_model_run_count_and_time(database, capsys):
    _run(["collections", database, "alias", "shop", "shop_v1"], capsys)
    out, _ = _run(["collections", database], capsys)
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "ALIASES", "MODEL", "ITEMS", "CREATED", "RUN"]
    assert re.match(r"foreign +- +\(not keras_dml\) +- +- +-$", lines[1]), lines[1]
    assert re.match(rf"shop_v1 +shop +{A} +10 +\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\dZ +/runs/shop_v1$",
                    lines[2]), lines[2]
    assert lines[3].split()[:4] == ["shop_v2", "-", B, "6"]
    listed = json.loads(_run(["collections", database, "list", "--format", "json"], capsys)[0])
    assert [c["name"] for c in listed] == ["foreign", "shop_v1", "shop_v2"]
    assert listed[1] == {**listed[1], "aliases": ["shop"], "keras_dml": True, "count": 10,
                         "model_fingerprint": A, "run": "/runs/shop_v1"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", listed[1]["created"])
    assert listed[0]["keras_dml"] is False and listed[0]["count"] is None


def test_an_alias_moves_in_one_step_and_index_reads_and_writes_through_it(database, capsys):
    out, _ = _run(["collections", database, "alias", "shop", "shop_v1"], capsys)
    assert out == f"alias shop -> shop_v1 (10 items, model {A}, run /runs/shop_v1)\n"
    with Index.open(database, "shop", provenance={"model_fingerprint": A}) as index:
        assert len(index) == 10 and index.provenance["model_fingerprint"] == A
        index.add(np.ones((2, 4), np.float32), labels=[1, 2])  # written to shop_v1
        assert index.search(np.ones((1, 4), np.float32), k=2).labels.tolist() == [[1, 2]]
    with pytest.raises(ModelMismatchError, match=f"Collection 'shop_v1' .* model {A}"):
        Index.open(database, "shop", provenance={"model_fingerprint": B})
    held = Index.open(database, "shop")  # a long-running reader, opened before the move
    out, _ = _run(["collections", database, "alias", "shop", "shop_v2"], capsys)
    assert out == (f"alias shop moved: shop_v1 (12 items, model {A}, run /runs/shop_v1) -> "
                   f"shop_v2 (6 items, model {B}, run /runs/shop_v2)\n")
    with Index.open(database, "shop") as index:
        assert len(index) == 6 and index.provenance["model_fingerprint"] == B
    assert len(held) == 12 and held.provenance["model_fingerprint"] == A  # stays on shop_v1
    with Collections(database) as collections:
        assert collections.aliases() == {"shop": "shop_v2"}
        assert collections.describe("shop_v1").count == 12
    out, _ = _run(["collections", database, "alias", "shop", "shop_v2"], capsys)
    assert out.startswith("alias shop already points to shop_v2")
    # An alias cannot take a collection's name nor point to another alias.
    _, err = _run(["collections", database, "alias", "shop_v1", "shop_v2"], capsys, 2)
    assert "'shop_v1' at" in err and "is a collection, so it cannot be an alias" in err
    _, err = _run(["collections", database, "alias", "other", "shop"], capsys, 2)
    assert "'shop' at" in err and "is an alias of collection 'shop_v2', not a collection" in err
    out, _ = _run(["collections", database, "unalias", "shop"], capsys)
    assert out == "removed alias shop (of collection shop_v2)\n"
    with Collections(database) as collections:
        assert collections.aliases() == {} and collections.names() == [
            "foreign", "shop_v1", "shop_v2"]
        collections.drop("shop_v1")
    with held, pytest.raises(ValueError, match="empty"):  # an error, not the other's items
        held.search(np.ones((1, 4), np.float32), k=1)


def test_drop_refuses_what_would_surprise_and_drops_only_with_yes(database, capsys):
    _run(["collections", database, "alias", "shop", "shop_v1"], capsys)
    refusals = [
        (["drop", "shop_v2"], "drop deletes collection shop_v2 (6 items, model "
         f"{B}, run /runs/shop_v2) at {database} for good: pass --yes to drop it."),
        (["drop", "nothing", "--yes"], f"{database} has no collection 'nothing'; it has "
         "['foreign', 'shop_v1', 'shop_v2']."),
        (["drop", "shop", "--yes"], f"'shop' at {database} is an alias of collection "
         "'shop_v1', not a collection: give the collection's name."),
        (["drop", "shop_v1", "--yes"], "collection shop_v1 is what alias shop points to: "
         f"move the alias first (keras-dml collections {database} alias shop NEW), or pass "
         "--with-aliases to remove it as well."),
        (["drop", "foreign", "--yes"], f"Collection 'foreign' at {database} was not made by "
         "keras_dml (it has no keras_dml record): keras_dml drops only its own collections."),
    ]
    for argv, message in refusals:
        _, err = _run(["collections", database, *argv], capsys, 2)
        assert err == f"keras-dml collections: error: {message}\n"
    with Collections(database) as collections:  # nothing was dropped
        assert collections.names() == ["foreign", "shop_v1", "shop_v2"]
        assert collections.aliases() == {"shop": "shop_v1"}
    out, _ = _run(["collections", database, "drop", "shop_v2", "--yes"], capsys)
    assert out == f"dropped collection shop_v2 (6 items, model {B}, run /runs/shop_v2)\n"
    out, _ = _run(["collections", database, "drop", "shop_v1", "--yes", "--with-aliases"],
                  capsys)
    assert out.endswith("; removed alias shop\n")
    with Collections(database) as collections:
        assert collections.names() == ["foreign"] and collections.aliases() == {}
    _, err = _run(["collections", str(database)[:-3] + "x.db"], capsys, 2)
    assert err == f"keras-dml collections: error: No Milvus Lite database at {database[:-3]}x.db.\n"
    assert not os.path.exists(database[:-3] + "x.db")  # looked at, not created


def test_the_stale_model_refusals_name_the_commands_of_the_switch(database, retrained, photos,  # noqa: F811
                                                                  capsys):
    _run(["collections", database, "alias", "shop", "shop_v1"], capsys)
    query = photos / "dog" / "1.png"
    mismatch = (f"Collection 'shop_v1' at {database} holds embeddings of model {A} (run "
                f"/runs/shop_v1), but the model at hand is {_fingerprint(retrained)} (run "
                f"{retrained}): its scores would be meaningless. To switch to this model, index "
                "it into a new collection while 'shop_v1' serves, point the alias the searches "
                "use to it in one step, then drop the old collection: ")
    _, err = _run(["index", retrained, "--images", photos, "--uri", database, "--collection",
                   "shop"], capsys, 2)
    assert err == (f"keras-dml index: error: {mismatch}"
                   f"{_switch_commands(retrained, photos, database, 'shop', 'shop_v1')}\n")
    _, err = _run(["search", database, query, "--collection", "shop", "--run", retrained],
                  capsys, 2)  # the collection records no image folder: DIR
    assert err == (f"keras-dml search: error: {mismatch}"
                   f"{_switch_commands(retrained, 'DIR', database, 'shop', 'shop_v1')} Or "
                   "search anyway with --allow-mismatch if you know they agree.\n")
    _, err = _run(["search", database, query, "--collection", "shop_v2", "--run", retrained],
                  capsys, 2)  # no alias yet: the one to create
    assert _switch_commands(retrained, "DIR", database, "ALIAS", "shop_v2") in err
    _, err = _run(["index", retrained, "--images", photos, "--uri", database, "--collection",
                   "shop_v2", "--overwrite"], capsys, 2)
    assert err == ("keras-dml index: error: --overwrite is for a saved index (--output), not "
                   "--uri: to start a Milvus collection again, drop it first (keras-dml "
                   f"collections {database} drop shop_v2 --yes) or index into a new "
                   "--collection.\n")
    with Collections(database) as collections:  # nothing changed
        assert [c.count for c in collections.list()] == [None, 10, 6]


def test_an_export_is_checked_against_the_collection_it_searches():
    recorded = {"model_fingerprint": A, "run": "/runs/a"}
    compare_export({"model_fingerprint": A, "training_run": {"run": "/runs/a"}}, recorded)
    with pytest.raises(ModelMismatchError, match=rf"model {A} \(run /runs/a\), but the model at "
                       rf"hand is {B} \(run /runs/b\)"):
        compare_export({"model_fingerprint": B, "training_run": {"run": "/runs/b"}}, recorded)
    with pytest.warns(UserWarning, match="The export records no model fingerprint"):
        compare_export({"training_run": None}, recorded)


@pytest.fixture(scope="module")
def retrained(run_dir, tmp_path_factory):  # noqa: F811
    """The run of `run_dir` trained again: a copy with other weights."""
    root = tmp_path_factory.mktemp("retrained") / "photo-run-2"
    shutil.copytree(run_dir, root)
    model = keras.saving.load_model(root / "model.keras")
    model.set_weights([w + 0.05 for w in model.get_weights()])
    model.save(root / "model.keras")
    return root


def _switch_commands(run, photos, uri, alias, old):  # noqa: F811
    return (f"keras-dml index {run} --images {photos} --uri {uri} --collection NEW; "
            f"keras-dml collections {uri} alias {alias} NEW; "
            f"keras-dml collections {uri} drop {old} --yes.")


@pytest.fixture()
def server(tmp_path):
    """A `milvus-lite server` on a free loopback port: its http:// URI."""
    with milvus_server(tmp_path / "served.db") as uri:
        yield uri


@pytest.mark.slow
@pytest.mark.parametrize("where", ["lite", "server", pytest.param(
    "standalone", marks=pytest.mark.requires("milvus"))])
def test_the_shop_switches_to_a_retrained_model_without_loss(where, run_dir, retrained,  # noqa: F811
                                                             photos, tmp_path, capsys, request):  # noqa: F811
    """Index run A into shop_v1 behind the alias shop; the retrained run B is refused with
    the commands of the switch; B goes into shop_v2 while shop_v1 serves; the alias moves;
    shop_v1 is dropped; every photo is there once, searched with B."""
    if where == "standalone":  # the module's Milvus standalone, emptied afterwards
        with standalone_uri(request) as uri:
            _switch_without_loss(uri, run_dir, retrained, photos, tmp_path, capsys)
        return
    uri = request.getfixturevalue("server") if where == "server" else str(tmp_path / "shop.db")
    _switch_without_loss(uri, run_dir, retrained, photos, tmp_path, capsys)


def _switch_without_loss(uri, run_dir, retrained, photos, tmp_path, capsys):  # noqa: F811
    query = photos / "dog" / "1.png"
    expected = sorted(list_images(photos).ids)
    out, _ = _run(["index", run_dir, "--images", photos, "--uri", uri, "--collection",
                   "shop_v1"], capsys)
    assert out.endswith("; 9 items\n")
    _run(["collections", uri, "alias", "shop", "shop_v1"], capsys)
    out, _ = _run(["search", uri, query, "--collection", "shop", "--k", "2"], capsys)
    assert re.search(r"^\s+1\. dog/1.png\s+label dog\s+score 1.0000", out, re.M)

    # Retrained: searching or updating the served catalogue with B is refused, with the way.
    commands = _switch_commands(retrained, photos, uri, "shop", "shop_v1")
    _, err = _run(["search", uri, query, "--collection", "shop", "--run", retrained], capsys, 2)
    assert err.startswith("keras-dml search: error: Collection 'shop_v1' at ")
    assert f"the model at hand is {_fingerprint(retrained)} (run {retrained})" in err
    assert commands + " Or search anyway with --allow-mismatch" in err
    assert "allow_mismatch=True" not in err and err.count("\n") == 1
    _, err = _run(["index", retrained, "--images", photos, "--uri", uri, "--collection",
                   "shop", "--update"], capsys, 2)
    assert err.endswith(commands + "\n") and "allow_mismatch" not in err
    _, err = _run(["index", retrained, "--images", photos, "--uri", uri, "--overwrite"],
                  capsys, 2)
    assert f"drop it first (keras-dml collections {uri} drop keras_dml --yes)" in err

    # B into shop_v2 while shop_v1 serves under the alias; then the alias moves in one step.
    _run(["index", retrained, "--images", photos, "--uri", uri, "--collection", "shop_v2"],
         capsys)
    out, _ = _run(["search", uri, query, "--collection", "shop", "--k", "1"], capsys)
    assert "dog/1.png" in out  # still run A's collection, searched with run A
    out, _ = _run(["collections", uri, "alias", "shop", "shop_v2"], capsys)
    assert out.startswith("alias shop moved: shop_v1 (9 items, model "
                          f"{_fingerprint(run_dir)}, run {run_dir}) -> shop_v2 (9 items, "
                          f"model {_fingerprint(retrained)}, run {retrained})")
    for extra in ([], ["--run", str(retrained)]):  # the run the alias' collection records
        out, _ = _run(["search", uri, query, "--collection", "shop", "--k", "2", *extra],
                      capsys)
        assert re.search(r"^\s+1\. dog/1.png\s+label dog\s+score 1.0000", out, re.M)
    _, err = _run(["search", uri, query, "--collection", "shop", "--run", run_dir], capsys, 2)
    assert _switch_commands(run_dir, photos, uri, "shop", "shop_v2") in err
    out, _ = _run(["collections", uri, "drop", "shop_v1", "--yes"], capsys)
    assert out.startswith("dropped collection shop_v1 (9 items")

    listed = json.loads(_run(["collections", uri, "--format", "json"], capsys)[0])
    assert [(c["name"], c["aliases"], c["count"], c["model_fingerprint"]) for c in listed] == [
        ("shop_v2", ["shop"], 9, _fingerprint(retrained))]
    with Index.open(uri, "shop") as index:
        assert sorted(index.ids) == expected  # nothing lost, nothing twice
        recorded = index.provenance
    # A service embedding with run B's SavedModel checks it against the collection.
    from keras_dml import export

    out, _ = _run(["export", retrained, tmp_path / "savedmodels", "--no-warmup"], capsys)
    info = export.read_export_info(re.search(r"SavedModel: (\S+)", out).group(1))
    assert info["model_fingerprint"] == recorded["model_fingerprint"]
    assert info["training_run"]["run"] == str(retrained) == recorded["run"]
    compare_export(info, recorded)
    with pytest.raises(ModelMismatchError):
        compare_export(info, {"model_fingerprint": _fingerprint(run_dir)})


def _fingerprint(run):
    model = keras.saving.load_model(run / "model.keras")
    return model_fingerprint(model)
