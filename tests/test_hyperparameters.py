"""A NaN, infinite or out-of-range hyperparameter is a ValueError naming it at
construction, never a NaN loss later."""

import pytest

from keras_dml import losses, mining
from keras_dml.layers.momentum import MomentumEncoder

NAN, INF = float("nan"), float("inf")

BAD = {
    "ms_alpha_nan": (lambda: losses.MultiSimilarity(alpha=NAN), "alpha"),
    "ms_beta_inf": (lambda: losses.MultiSimilarity(beta=INF), "beta"),
    "ms_base_nan": (lambda: losses.MultiSimilarity(base=NAN), "base"),
    "ms_miner_epsilon_inf": (lambda: mining.MultiSimilarityMiner(INF), "epsilon"),
    "raw_alpha_zero": (lambda: losses.RelativeAbsoluteWeighting(alpha=0.0), "alpha"),
    "proxy_anchor_alpha_inf": (lambda: losses.ProxyAnchor(3, alpha=INF), "alpha"),
    "proxy_anchor_delta_nan": (lambda: losses.ProxyAnchor(3, delta=NAN), "delta"),
    "proxy_anchor_lr_inf": (lambda: losses.ProxyAnchor(3, proxy_lr_multiplier=INF),
                            "proxy_lr_multiplier"),
    "proxy_nca_scale_inf": (lambda: losses.ProxyNCA(3, scale=INF), "scale"),
    "proxy_nca_scale_zero": (lambda: losses.ProxyNCA(3, scale=0.0), "scale"),
    "normalized_softmax_temperature_inf": (
        lambda: losses.NormalizedSoftmax(3, temperature=INF), "temperature"),
    "ms_miner_epsilon_nan": (lambda: mining.MultiSimilarityMiner(NAN), "epsilon"),
    "semihard_margin_inf": (lambda: mining.SemiHardMiner(margin=INF), "margin"),
    "pair_margin_nan": (lambda: mining.PairMarginMiner(pos_margin=NAN), "pos_margin"),
    "xbm_momentum_one": (lambda: losses.CrossBatchMemory(losses.MultiSimilarity(), 64,
                                                         momentum=1.0),
                         r"momentum must be in \[0, 1\), got 1.0"),
    "xbm_momentum_negative": (lambda: losses.CrossBatchMemory(losses.MultiSimilarity(), 64,
                                                              momentum=-0.1), "momentum"),
    "momentum_encoder_nan": (lambda: MomentumEncoder(momentum=NAN), "momentum"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_hyperparameter_is_a_value_error_naming_it(case):
    make, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        make()


def test_integer_at_least_strict_refuses_integral_floats():
    import numpy as np

    from keras_dml.hyperparameters import integer_at_least

    assert integer_at_least("bins", 2.0, 2) == 2 and type(integer_at_least("k", 3.0, 1)) is int
    assert integer_at_least("k", np.int64(3), 1, strict=True) == 3
    for value in (2.0, np.float32(2), True, "3", 0, None):
        with pytest.raises(ValueError, match=r"^epochs must be a positive integer, got "):
            integer_at_least("epochs", value, 1, strict=True)
    for value in (2.5, True, "3", -1):
        with pytest.raises(ValueError, match=r"^warmup must be an integer >= 0, got "):
            integer_at_least("warmup", value, 0)
    with pytest.raises(ValueError, match=r"version must be a positive integer \(why\), got 0"):
        integer_at_least("version", 0, 1, strict=True, why=" (why)")


def test_below_one_takes_the_half_open_unit_interval():
    from keras_dml.hyperparameters import below_one

    assert below_one("momentum", 0) == 0.0 and below_one("momentum", 0.999) == 0.999
    for value in (1.0, -0.1, NAN, "x"):
        with pytest.raises(ValueError, match=r"^momentum must be"):
            below_one("momentum", value)
