"""KerasHub backbones ("hub:PRESET"), offline: tiny random presets of each family written
with KerasHub's own `save_to_preset`, built, saved and reloaded, trained, evaluated,
exported and indexed from the command line, and the zero-shot baseline."""

import json
import os

import keras
import numpy as np
import pytest

from keras_dml import backbones, cli, hub_backbones
from keras_dml.training.config import TrainConfig

pytestmark = [pytest.mark.backend_neutral, pytest.mark.requires("keras_hub")]

FAMILIES = ("dinov2", "dinov3", "vit", "clip", "siglip")
SIZE = 32  # the tiny towers' image side (patches of 8: 16 patch tokens)
DIM = 16


class _TinyPresets(dict):
    """Family -> the folder of a randomly initialised preset of it (backbone and image
    converter, saved with KerasHub's own `save_to_preset`), each written when first
    asked for."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, family):
        import keras_hub

        models, layers = keras_hub.models, keras_hub.layers
        tiny = {"patch_size": 8, "num_layers": 2, "num_heads": 2,
                "image_shape": (SIZE, SIZE, 3)}
        tower = {"hidden_dim": DIM, "intermediate_dim": 32, **tiny}
        text = {"vocabulary_size": 50, "embedding_dim": DIM, "hidden_dim": DIM,
                "num_layers": 1, "num_heads": 2, "intermediate_dim": 32,
                "max_sequence_length": 8}
        networks = {
            "dinov2": (lambda: models.DINOV2Backbone(
                position_embedding_shape=(SIZE, SIZE, 3), **tower),
                layers.DINOV2ImageConverter),
            "dinov3": (lambda: models.DINOV3Backbone(**tower), layers.DINOV3ImageConverter),
            "vit": (lambda: models.ViTBackbone(hidden_dim=DIM, mlp_dim=32, **tiny),
                    layers.ViTImageConverter),
            "clip": (lambda: models.CLIPBackbone(
                models.CLIPVisionEncoder(**tower), models.CLIPTextEncoder(**text),
                projection_dim=DIM), layers.CLIPImageConverter),
            "siglip": (lambda: models.SigLIPBackbone(models.SigLIPVisionEncoder(**tower),
                                                     models.SigLIPTextEncoder(**text)),
                       layers.SigLIPImageConverter),
        }
        network, converter = networks[family]
        folder = os.path.join(self.root, family)
        keras.utils.set_random_seed(0)
        network().save_to_preset(folder)
        converter(image_size=(SIZE, SIZE), scale=1 / 127.5, offset=-1).save_to_preset(folder)
        self[family] = folder
        return folder


@pytest.fixture(scope="session")
def presets(tmp_path_factory):
    return _TinyPresets(str(tmp_path_factory.mktemp("hub_presets")))


def _pixels(count=2, size=40):
    return np.random.default_rng(0).uniform(0, 255, (count, size, size, 3)).astype("float32")


def _saved_and_loaded(model, folder):
    from keras_dml.export import load_keras_model

    path = os.path.join(folder, "model.keras")
    model.save(path)
    return load_keras_model(path)


def test_dinov2_class_token_trains_and_reloads_equal(presets, tmp_path):
    backbone = backbones.get(f"hub:{presets['dinov2']}", (40, 40, 3))
    assert backbone.get_layer("token_pooling").pooling == "cls"
    x = _pixels(4)
    assert tuple(backbone(x).shape) == (4, DIM)
    # trained, the saved model is the trained one: KerasHub saves DINOv2's position
    # embeddings at the input size through a resize, so they stay as the preset has them
    frozen = [v.path for v in backbone.weights if not v.trainable]
    assert any(path.endswith("interpolated_position_embeddings") for path in frozen)
    model = keras.Model(backbone.input, keras.layers.Dense(2)(backbone.output))
    model.compile(keras.optimizers.Adam(0.1), "mse")
    model.fit(x, np.ones((4, 2)), epochs=1, verbose=0)
    y = keras.ops.convert_to_numpy(model(x))
    loaded = _saved_and_loaded(model, str(tmp_path))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), y, atol=1e-5)


@pytest.mark.slow  # 13 models built, saved and loaded: ~1 min
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_and_pooling_builds_and_reloads_equal(presets, family, tmp_path):
    poolings = ("mean", "gem", "head") if family == "siglip" else ("cls", "mean", "gem")
    x = _pixels()
    for pooling in poolings:
        model = backbones.get(f"hub:{presets[family]}", (40, 40, 3), pooling=pooling)
        y = keras.ops.convert_to_numpy(model(x))
        assert y.shape == (2, DIM) and np.all(np.isfinite(y)), (family, pooling)
        loaded = _saved_and_loaded(model, str(tmp_path))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), y, atol=1e-5,
                                   err_msg=f"{family} {pooling}")


@pytest.mark.slow  # ~5 s
def test_siglip_defaults_to_its_head_and_refuses_the_class_token(presets):
    model = backbones.get(f"hub:{presets['siglip']}", (SIZE, SIZE, 3))
    assert not any(layer.name == "token_pooling" for layer in model.layers)
    with pytest.raises(ValueError, match="needs a class token"):
        backbones.get(f"hub:{presets['siglip']}", (SIZE, SIZE, 3), pooling="cls")


@pytest.mark.slow  # three towers built: ~4 s
def test_weights_none_random_and_a_run_path_warm_starts(presets, tmp_path):
    name = f"hub:{presets['dinov2']}"
    pretrained = backbones.get(name, (SIZE, SIZE, 3))
    random = backbones.get(name, (SIZE, SIZE, 3), weights="none")
    x = _pixels(size=SIZE)
    assert not np.allclose(keras.ops.convert_to_numpy(random(x)),
                           keras.ops.convert_to_numpy(pretrained(x)))
    pretrained.save(str(tmp_path / "backbone.keras"))
    warm = backbones.get(name, (SIZE, SIZE, 3), weights=str(tmp_path / "backbone.keras"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(warm(x)),
                               keras.ops.convert_to_numpy(pretrained(x)), atol=1e-5)


@pytest.mark.slow  # ~10 s
@pytest.mark.parametrize("family", ["dinov2", "dinov3"])
def test_drop_path_rate_trains_dino_towers(presets, family, tmp_path):
    from keras_dml.layers import DropPath

    model = backbones.get(f"hub:{presets[family]}", (SIZE, SIZE, 3), drop_path_rate=0.2)
    tower = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    rates = [block.drop_path.rate for block in tower._flatten_layers()
             if isinstance(getattr(block, "drop_path", None), DropPath)]
    # DINOv2: the rate in every block; DINOv3: rising from 0 (no drop path) to the rate
    assert rates == [0.2, 0.2] if family == "dinov2" else rates == [pytest.approx(0.2)]
    assert tower.get_config()["drop_path_rate"] == 0.0  # the saved model: inference only
    x = _pixels(4, SIZE)
    trained = keras.Model(model.input, keras.layers.Dense(2)(model.output))
    trained.compile(keras.optimizers.Adam(0.01), "mse")
    trained.fit(x, np.ones((4, 2)), epochs=1, verbose=0)  # a compiled step on each backend
    y = keras.ops.convert_to_numpy(trained(x))
    loaded = _saved_and_loaded(trained, str(tmp_path))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), y, atol=1e-5)
    if family == "dinov2":
        with pytest.raises(ValueError, match="ViTBackbone has no drop_path_rate"):
            backbones.get(f"hub:{presets['vit']}", (SIZE, SIZE, 3), drop_path_rate=0.2)


def test_a_preset_that_cannot_download_fails_in_one_line(monkeypatch):
    import keras_hub

    def offline(*args, **kwargs):
        raise ConnectionError("HTTPSConnectionPool(host='api.kaggle.com', port=443): Max "
                              "retries exceeded\nwith more lines")

    monkeypatch.setattr(keras_hub.models.Backbone, "from_preset", offline)
    monkeypatch.setenv("KAGGLEHUB_CACHE", "/somewhere/kagglehub")
    with pytest.raises(hub_backbones.HubPresetError) as raised:
        backbones.get("hub:dinov2_small", (SIZE, SIZE, 3))
    message = str(raised.value)
    assert "\n" not in message
    assert "/somewhere/kagglehub" in message and "--backbone hub:PATH" in message
    assert "ConnectionError" in message


def test_a_model_holding_keras_hub_layers_says_to_install_it(presets, tmp_path, monkeypatch):
    model = backbones.get(f"hub:{presets['vit']}", (SIZE, SIZE, 3))
    model.save(str(tmp_path / "m.keras"))
    (tmp_path / "plain.keras").write_bytes(b"not a zip")

    def missing():
        raise ImportError("no keras_hub")

    monkeypatch.setattr(hub_backbones, "_keras_hub", missing)
    hub_backbones.import_keras_hub_for(str(tmp_path / "plain.keras"))  # Keras says why
    with pytest.raises(ImportError, match=r'm.keras holds a KerasHub backbone: pip install '
                       r'"keras_dml\[hub\]"'):
        hub_backbones.import_keras_hub_for(str(tmp_path / "m.keras"))


def test_training_config_of_a_hub_backbone():
    config = TrainConfig(dataset="folder", data_dir="x", backbone="hub:dinov2_small")
    assert config.backbone == "hub:dinov2_small" and config.weights == "preset"
    assert config.augment_crop == "random_resized" and config.token_pooling is None
    assert TrainConfig(dataset="folder", data_dir="x", backbone="hub:d", weights="None",
                       token_pooling="gem", drop_path_rate=0.1).weights == "none"
    for bad, match in [({"weights": "imagenet"}, "weights=imagenet does not apply"),
                       ({"token_pooling": "max"}, "token_pooling must be one of"),
                       ({"drop_path_rate": 1.5}, r"drop_path_rate must be in \[0, 1\)")]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(dataset="folder", data_dir="x", backbone="hub:d", **bad)
    for bad, match in [({"weights": "preset"}, "weights=preset does not apply to cnn3"),
                       ({"token_pooling": "cls"}, "token_pooling applies to a hub:PRESET")]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(backbone="cnn3", **bad)
    assert backbones.takes_raw_pixels("hub:x") and backbones.takes_raw_pixels("resnet50")
    assert not backbones.takes_raw_pixels("cnn3")
    with pytest.raises(ValueError, match="hub:PRESET"):
        backbones.backbone_name("hub:")


# The command line on real photos: a few CUB species.


@pytest.fixture(scope="module")
def birds(tmp_path_factory):
    from conftest import require_shared_datasets

    images = os.path.join(require_shared_datasets(), "cub200_subset", "CUB_200_2011",
                          "images")
    root = tmp_path_factory.mktemp("birds")
    for species in sorted(os.listdir(images))[:6]:
        os.makedirs(root / species)
        for name in sorted(os.listdir(os.path.join(images, species)))[:6]:
            os.symlink(os.path.join(images, species, name), root / species / name)
    return root


def _cli(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _recall_at_1(text, title):
    """The R@1 column of `title`'s row in evaluate's table (headed by "ranking")."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("ranking")).split()
    row = next(line for line in lines if line.startswith(title)).split()
    return float(row[len(title.split()) + header.index("R@1") - 1])


@pytest.fixture(scope="module")
def hub_run(presets, birds, tmp_path_factory):
    """`(run folder, train's printed output)`: `keras-dml train` from the local DINOv2
    preset on the birds, a few steps."""
    import contextlib
    import io

    runs = tmp_path_factory.mktemp("hub_runs")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main([str(a) for a in [
            "train", "--data-dir", birds, "--backbone", f"hub:{presets['dinov2']}",
            "--token-pooling", "cls", "--layer-decay", 0.7, "--image-size", SIZE,
            "--epochs", 1, "--steps-per-epoch", 2, "--classes-per-batch", 2,
            "--samples-per-class", 2, "--embedding-dim", 8, "--no-plots", "--no-export",
            "--run-name", "hub", "--runs-dir", runs]])
    assert code == 0, printed.getvalue()
    return runs / "hub", printed.getvalue()


@pytest.mark.slow  # a few training steps, then evaluate, index, search, export: ~1 min
@pytest.mark.shared_data
def test_train_evaluate_index_export_from_a_local_preset(presets, birds, hub_run, tmp_path,
                                                          capsys):
    run, out = hub_run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"]["token_pooling"] == "cls"  # the default, as evaluate uses
    assert summary["export"]["preprocessing"]["normalization"] == "none"  # raw pixels
    # the "before training" row is the preset's zero-shot figure: evaluate --backbone
    zero_shot = _cli(["evaluate", "--backbone", f"hub:{presets['dinov2']}", "--dataset",
                      "folder", "--data-dir", birds, "--no-report", "--output",
                      tmp_path / "zero_shot"], capsys)
    assert "before training" in out
    assert _recall_at_1(zero_shot, "exact ranking") == pytest.approx(
        100 * summary["recall_before"]["recall@1"], abs=0.05)
    evaluated = _cli(["evaluate", run, "--no-report", "--output", tmp_path / "e"], capsys)
    assert _recall_at_1(evaluated, "exact ranking") == pytest.approx(
        100 * summary["recall_after"]["recall@1"], abs=0.05)
    _cli(["index", run, "--images", birds, "--output", tmp_path / "index"], capsys)
    found = _cli(["search", tmp_path / "index", next(birds.iterdir()), "--k", 2], capsys)
    assert "score" in found
    if keras.backend.backend() == "tensorflow":
        exported = _cli(["export", run, tmp_path / "export"], capsys)
        assert os.path.isdir(tmp_path / "export" / "1"), exported


@pytest.mark.slow  # indexes 36 photos into Milvus Lite, then searches: ~30 s
@pytest.mark.shared_data
@pytest.mark.requires("fastapi", "multipart", "pymilvus", "milvus_lite")
def test_keras_dml_serve_searches_with_a_hub_run_its_export_and_the_zero_shot_backbone(
        presets, hub_run, birds, tmp_path):
    # no capsys: the Milvus Lite server started here outlives the test's captured streams
    from fastapi.testclient import TestClient

    from keras_dml.serve import create_app
    from serve_fixtures import index

    run, _ = hub_run
    uri = tmp_path / "catalogue.db"
    index(run, birds, uri)
    zero_shot = f"hub:{presets['siglip']}"  # a catalogue of the zero-shot baseline
    assert cli.main(["index", "--backbone", zero_shot, "--images", str(birds), "--uri",
                     str(uri), "--collection", "zero_shot"]) == 0
    species = sorted(birds.iterdir())[1]
    photo = sorted(species.iterdir())[2]
    served = [(run, None)]
    if keras.backend.backend() == "tensorflow":  # the SavedModel export is TensorFlow's
        assert cli.main(["export", str(run), str(tmp_path / "export")]) == 0
        served.append((tmp_path / "export", None))
    served.append((zero_shot, "zero_shot"))
    answers = []
    for model, collection in served:
        app = create_app(str(model), str(uri), collection, max_wait_ms=20)
        with TestClient(app) as client:
            answer = client.post("/search", files={"image": (photo.name, photo.read_bytes())},
                                 params={"k": 3})
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
        first = answers[-1]["results"][0]
        assert first["id"] == os.path.join(species.name, photo.name), model
        assert first["label"] == species.name
        assert first["similarity"] == pytest.approx(1.0, abs=1e-3)
    if len(answers) == 3:  # the export answers as the run
        assert [r["id"] for r in answers[1]["results"]] == \
            [r["id"] for r in answers[0]["results"]]
        np.testing.assert_allclose([r["similarity"] for r in answers[1]["results"]],
                                   [r["similarity"] for r in answers[0]["results"]],
                                   atol=1e-3)


@pytest.mark.slow  # embeds 36 photos twice with a tiny tower: ~20 s
@pytest.mark.shared_data
def test_zero_shot_index_is_searched_with_the_recorded_backbone(presets, birds, tmp_path,
                                                                capsys):
    out = _cli(["index", "--backbone", f"hub:{presets['siglip']}", "--images", birds,
                "--output", tmp_path / "index"], capsys)
    assert "36 items, dimension 16" in out
    provenance = json.loads((tmp_path / "index" / "index.json").read_text())["provenance"]
    assert provenance["run"] == f"hub:{presets['siglip']}"
    assert provenance["model_fingerprint"]
    found = _cli(["search", tmp_path / "index", next(birds.iterdir()), "--k", 1], capsys)
    assert "score 1.0000" in found  # each photo finds itself first
    code = cli.main(["index", "--backbone", f"hub:{presets['siglip']}", "--images",
                     str(birds)])
    assert code == 2
    assert "pass --output DIR" in capsys.readouterr().err


def test_layer_decay_scales_each_block_from_the_top(presets):
    model = backbones.get(f"hub:{presets['dinov2']}", (SIZE, SIZE, 3))
    variables = model.trainable_weights
    scales = dict(zip((v.path for v in variables),
                      hub_backbones.layer_decay_scales(variables, 0.5)))
    assert {scale for path, scale in scales.items() if "/layers_1/" in path} == {0.5}
    assert {scale for path, scale in scales.items() if "/layers_0/" in path} == {0.25}
    assert {scale for path, scale in scales.items() if "embeddings/" in path} == {0.125}
    assert {scale for path, scale in scales.items() if "backbone_layernorm/" in path} == {1.0}
    with pytest.raises(ValueError, match="no variable belongs to a transformer"):
        hub_backbones.layer_decay_scales(variables[:2], 0.5)


def test_step_scale_scales_each_variables_update():
    from keras_dml.callbacks import BackboneStepScale

    def trained(callbacks):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((2,))
        low = keras.layers.Dense(2, use_bias=False, name="low")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(1, use_bias=False, name="top")(low))
        start = [keras.ops.convert_to_numpy(v) for v in model.weights]
        model.compile(keras.optimizers.Adam(0.1), "mse")
        model.fit(np.ones((4, 2)), np.full((4, 1), 5.0), epochs=1, verbose=0,
                  callbacks=callbacks(model))
        return [keras.ops.convert_to_numpy(v) - s for v, s in zip(model.weights, start)]

    plain = trained(lambda model: [])
    scaled = trained(lambda model: [BackboneStepScale(model.weights, scales=[0.25, 1.0])])
    np.testing.assert_allclose(scaled[0], 0.25 * plain[0], rtol=1e-5)  # Adam: the step
    np.testing.assert_allclose(scaled[1], plain[1], rtol=1e-5)
    with pytest.raises(ValueError, match="one per variable"):
        BackboneStepScale([], scales=[1.0])


def test_layer_decay_is_a_hub_option():
    assert TrainConfig(backbone="hub:d", dataset="folder", data_dir="x",
                       layer_decay=0.65).layer_decay == 0.65
    with pytest.raises(ValueError, match=r"layer_decay must be in \(0, 1\]"):
        TrainConfig(backbone="hub:d", dataset="folder", data_dir="x", layer_decay=0)
    with pytest.raises(ValueError, match="layer_decay applies to a hub:PRESET"):
        TrainConfig(backbone="cnn3", layer_decay=0.7)
