"""Frozen BatchNorm, the head warm-up and the backbone learning-rate multiplier."""

import keras
import numpy as np
import pytest

from keras_dml import backbones, losses
from keras_dml.training import model as training_model
from keras_dml.callbacks import fine_tuning
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel


def _model(name="cnn3", shape=(16, 16, 1), freeze=False, optimizer=None, seed=0):
    keras.utils.set_random_seed(seed)
    backbone = backbones.get(name, shape, **({"width": 4} if name == "cnn3" else {}))
    if freeze:
        assert fine_tuning.freeze_batch_norm(backbone) > 0
    model = DMLModel(backbone.input, EmbeddingHead(8, name="embedding")(backbone.output))
    model.compile(optimizer or keras.optimizers.Adam(1e-2),
                  loss=losses.InstanceCrossEntropy(), run_eagerly=True)
    return model


def _batches(shape=(16, 16, 1), steps=3):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (8 * steps,) + shape).astype("float32")
    y = np.tile(np.repeat(np.arange(4), 2), steps)
    return x, y


def _values(variables):
    return [keras.ops.convert_to_numpy(v).copy() for v in variables]


def _moving_statistics(model):
    return _values([v for v in model.weights if "moving" in v.path])


@pytest.mark.parametrize("name,shape", [
    ("cnn3", (16, 16, 1)),
    pytest.param("MobileNetV3Small", (32, 32, 3), marks=pytest.mark.slow)])
def test_frozen_batch_norm_keeps_its_statistics_and_scale(name, shape):
    for freeze in (False, True):
        model = _model(name, shape, freeze=freeze)
        stats = _moving_statistics(model)
        gammas = {id(v) for v in model.weights if v.path.endswith("gamma")}
        trained = {id(v) for v in training_model.backbone_variables(model)}
        assert bool(gammas & trained) != freeze
        x, y = _batches(shape, steps=1)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
        same = all(np.array_equal(a, b) for a, b in zip(stats, _moving_statistics(model)))
        assert same == freeze


def test_head_warmup_keeps_the_backbone_for_n_steps_then_trains_it():
    model = _model()
    backbone = training_model.backbone_variables(model)
    head = model.get_layer("embedding").trainable_weights
    assert backbone and not {id(v) for v in backbone} & {id(v) for v in head}
    before, head_before = _values(backbone), _values(head)
    x, y = _batches(steps=3)
    scale = fine_tuning.BackboneStepScale(backbone, warmup_steps=2)
    model.fit(x[:16], y[:16], batch_size=8, verbose=0, shuffle=False, callbacks=[scale])
    assert all(np.array_equal(a, b) for a, b in zip(before, _values(backbone)))
    assert not all(np.array_equal(a, b) for a, b in zip(head_before, _values(head)))
    model.fit(x[16:], y[16:], batch_size=8, verbose=0, shuffle=False, callbacks=[scale])
    assert not any(np.array_equal(a, b) for a, b in zip(before, _values(backbone)))


@pytest.mark.parametrize("optimizer", [pytest.param("sgd", marks=pytest.mark.slow), "adamw"])
def test_backbone_multiplier_scales_the_backbone_step(optimizer):
    def step(multiplier):
        opt = (keras.optimizers.SGD(0.1, momentum=0.9) if optimizer == "sgd"
               else keras.optimizers.AdamW(1e-2, weight_decay=0.1))
        model = _model(optimizer=opt)
        variables = training_model.backbone_variables(model)
        before = _values(variables)
        head_before = _values(model.get_layer("embedding").trainable_weights)
        x, y = _batches(steps=1)
        model.fit(x, y, batch_size=8, verbose=0, shuffle=False,
                  callbacks=[fine_tuning.BackboneStepScale(variables, multiplier)])
        head = _values(model.get_layer("embedding").trainable_weights)
        return ([a - b for a, b in zip(_values(variables), before)],
                [a - b for a, b in zip(head, head_before)])

    full, full_head = step(1.0)
    tenth, tenth_head = step(0.1)
    for a, b in zip(full, tenth):
        np.testing.assert_allclose(b, 0.1 * a, rtol=1e-4, atol=1e-7)
    assert max(np.abs(a).max() for a in full) > 1e-4
    for a, b in zip(full_head, tenth_head):  # the head's step is not scaled
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-7)


def test_step_scale_checks_its_arguments():
    with pytest.raises(ValueError, match="multiplier"):
        fine_tuning.BackboneStepScale([], multiplier=-1)
    with pytest.raises(ValueError, match="warmup_steps"):
        fine_tuning.BackboneStepScale([], warmup_steps=-2)


def test_backbone_variables_leave_out_the_head_and_the_proxies():
    model = _model()
    model.compile("adam", loss=losses.ProxyAnchor(num_classes=4))
    backbone = {id(v) for v in training_model.backbone_variables(model)}
    assert not backbone & {id(v) for v in model.loss_layer.weights}
    assert not backbone & {id(v) for v in model.get_layer("embedding").weights}
    assert backbone == {id(v) for v in model.trainable_weights
                        if "embedding" not in v.path and "proxies" not in v.path}
