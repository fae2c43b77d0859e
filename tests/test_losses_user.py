"""A loss written by a user: what `register` refuses at class definition, the
namespace that keeps the built-ins, Keras' own `losses.get` and `compile` by name, and
`keras_dml.testing.check_loss` failing a wrong loss.
"""

import json
import pathlib

import keras
import numpy as np
import pytest

import user_losses
from keras_dml import losses
from keras_dml.losses import PairLoss, register
from keras_dml.losses.registry import ENTRIES, USER_ENTRIES
from keras_dml.testing import CHECKS, check_loss

DATA = pathlib.Path(__file__).parent / "data"
#: `keras.saving.serialize_keras_object` of every loss by the tree before user
#: namespaces (commit 801a1ce), and three with non-default settings
SAVED_BEFORE = json.loads((DATA / "loss_configs_before_namespaces.json").read_text())


def _batch():
    rng = np.random.default_rng(0)
    return np.repeat(np.arange(4), 3).astype("int32"), rng.normal(size=(12, 8)).astype("f")


def _init(extra=""):
    """Source of a constructor taking `extra` hyperparameters besides Keras' own."""
    return (f"def __init__(self, {extra}*, metric='cosine', miner=None, "
            "reduction='sum_over_batch_size', name=None, dtype=None):\n"
            "    PairLoss.__init__(self, metric=metric, miner=miner, reduction=reduction, "
            "name=name, dtype=dtype)\n")


def _class(name, body, bases=(PairLoss,)):
    namespace = {}
    exec(body, {"keras": keras, "PairLoss": PairLoss}, namespace)  # noqa: S102 (a class body written here)
    return type(name, bases, {**namespace, "__module__": __name__})


def test_a_hyperparameter_left_out_of_config_keys_is_refused_at_registration():
    cls = _class("LosesMargin", _init("margin=0.5, ") + "    self.margin = margin\n")
    with pytest.raises(TypeError, match=r"LosesMargin.__init__ takes 'margin', which "
                                        r"get_config would not save.*config_keys"):
        register()(cls)
    kept = _class("KeepsMargin", _init("margin=0.5, ") + "    self.margin = margin\n")
    kept.config_keys = PairLoss.config_keys + ("margin",)
    kept.compute_value = lambda self, m, p: keras.ops.sum(m * self.margin, axis=1)
    register()(kept)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(kept(margin=0.9)))
    assert type(restored) is kept and restored.margin == 0.9
    unsaved = _class("AliasOnly", _init("old_name=None, "))
    unsaved.unsaved_keys = ("old_name",)
    assert register()(unsaved) is unsaved


def test_an_init_without_name_or_reduction_is_refused_at_registration():
    cls = _class("NoKerasArguments", "def __init__(self, margin=0.5):\n"
                                     "    PairLoss.__init__(self)\n    self.margin = margin\n")
    with pytest.raises(TypeError, match=r"NoKerasArguments.__init__ takes no 'name' or "
                                        r"'reduction'.*super\(\).__init__"):
        register()(cls)


def test_a_user_loss_named_like_a_built_in_keeps_the_built_in():
    built_in = losses.Contrastive
    user = _class("Contrastive", _init())
    user.compute_value = lambda self, m, p: keras.ops.sum(m, axis=1)
    assert register()(user) is user
    assert USER_ENTRIES["Custom>Contrastive"].cls is user
    assert ENTRIES["Contrastive"].cls is built_in
    assert type(losses.get("Contrastive")) is built_in
    assert type(losses.get("keras_dml>Contrastive")) is built_in
    assert type(losses.get("Custom>Contrastive")) is user
    for key, saved in SAVED_BEFORE.items():  # configs saved by the tree before
        loss = keras.saving.deserialize_keras_object(saved)
        assert type(loss).__module__.startswith("keras_dml."), key
        assert keras.saving.serialize_keras_object(loss) == saved, key
    model = keras.saving.load_model(DATA / "model_with_losses_before_keyword_only.keras")
    assert type(model.loss.losses[0]) is built_in
    other = _class("Contrastive", _init())
    other.__qualname__ = "AnotherContrastive"
    with pytest.raises(ValueError, match=r"'Custom>Contrastive' is taken by"):
        register()(other)
    with pytest.raises(ValueError, match=r"package='keras_dml'\) is keras_dml's own"):
        register(package="keras_dml")(_class("Mine", _init()))
    assert register(package="my_project")(other) is other
    assert type(losses.get("my_project>Contrastive")) is other


def test_keras_own_get_and_a_plain_model_compile_find_registered_names():
    assert type(keras.losses.get("keras_dml>MultiSimilarity")) is losses.MultiSimilarity
    assert type(keras.losses.get("Custom>ValueContrastive")) is user_losses.ValueContrastive
    labels, x = _batch()
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer="sgd", loss="keras_dml>MultiSimilarity")
    history = model.fit(x, labels, batch_size=12, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_a_forgotten_register_names_keras_dml_losses_register(tmp_path):
    cls = _class("Unregistered", _init())
    cls.compute_value = lambda self, m, p: keras.ops.sum(m, axis=1)
    with pytest.raises(ValueError, match=r"Unregistered is not registered.*"
                                         r"@keras_dml\.losses\.register\(\)"):
        cls().get_config()
    from keras_dml.models import DMLModel

    inputs = keras.Input((8,))
    model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer="sgd", loss=cls())
    with pytest.raises(ValueError, match=r"keras_dml\.losses\.register"):
        model.save(tmp_path / "model.keras")
    with pytest.raises(ValueError, match=r"decorate your own loss with "
                                         r"@keras_dml\.losses\.register\(\)"):
        losses.get("Custom>NeverRegistered")


def test_check_loss_fails_a_loss_whose_weights_are_off_by_a_factor():
    with pytest.raises(AssertionError, match="OffByAFactor: W is not d value / d matrix"):
        check_loss(user_losses.OffByAFactor, checks=["weights"])


def test_check_loss_fails_a_loss_whose_config_loses_a_setting():
    with pytest.raises(AssertionError, match=r"ForgetfulMargin: margin=0.9 comes back as 0.5"):
        check_loss(user_losses.ForgetfulMargin, checks=["config"])


#: the checks that compile nothing and start no process (the quick tier's)
EAGER_CHECKS = [name for name in CHECKS if name not in ("weights", "save_load")]


def test_check_loss_passes_a_value_only_user_loss():
    assert check_loss(user_losses.ValueContrastive, checks=EAGER_CHECKS) == EAGER_CHECKS
    assert check_loss(user_losses.MeanOverPairs, checks=["pair_weights"]) == ["pair_weights"]


@pytest.mark.slow  # eager, tf.function and XLA steps of both losses
def test_check_loss_passes_value_only_user_losses_in_every_mode():
    checks = [name for name in CHECKS if name != "save_load"]
    assert check_loss(user_losses.ValueContrastive, checks=checks) == checks
    assert check_loss(user_losses.MeanOverPairs, checks=checks) == checks


def test_check_loss_fails_a_false_row_local_claim():
    with pytest.raises(AssertionError, match="MeanOverPairs claims row_local"):
        check_loss(user_losses.MeanOverPairs, checks=["row_local"], row_local=True)


@pytest.mark.slow  # a fresh Python process loads the saved model
def test_check_loss_loads_a_user_loss_in_a_fresh_process():
    assert check_loss(user_losses.ValueContrastive, checks=["save_load"]) == ["save_load"]


def test_check_loss_refuses_an_unregistered_class_and_unknown_checks():
    with pytest.raises(ValueError, match="not a registered loss class"):
        check_loss(_class("Loose", _init()))
    with pytest.raises(ValueError, match="unknown checks"):
        check_loss(user_losses.ValueContrastive, checks=["speed"])
