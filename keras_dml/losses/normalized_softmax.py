"""Normalised softmax (NormFace): cross entropy over cosines to learned class weights."""

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["NormalizedSoftmax"]


@register(example={"num_classes": 8}, reference="proxies")
class NormalizedSoftmax(ProxyLoss):
    """Normalised softmax cross entropy (NormFace), the ICE paper's CCE baseline.

    Categorical cross entropy (ICE paper eq. 1) with the features f_i and the class
    weight vectors w_c both L2-normalised and the logits divided by a temperature
    T, i.e. on the cosine similarity S(f_i, w_c):

        L_i = -log( exp(S(f_i, w_{y_i}) / T) / sum_{c=1}^{C} exp(S(f_i, w_c) / T) )

    and the batch loss is the mean over samples. The class weights are the
    proxies. Weights are the exact derivatives,
    dL_i/dS(f_i, w_c) = (softmax(S(f_i, .) / T)_c - [c = y_i]) / T.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        temperature: T. Defaults to 0.05 (scale 20), as in Zhai & Wu,
            "Classification is a Strong Baseline for Deep Metric Learning" (2019)
            and pytorch-metric-learning.
        proxy_lr_multiplier: class weights' learning rate relative to the
            optimizer's. Defaults to 1.0.
        proxy_initializer: defaults to kaiming-normal.

    Examples:

    >>> loss = keras_dml.losses.NormalizedSoftmax(num_classes=100)

    Reference:
        Wang, Xiang, Cheng, Yuille, "NormFace: L2 Hypersphere Embedding for Face
        Verification", ACM MM 2017; ICE paper (Wang et al. 2019) eq. 1, Table 3.
    """

    config_keys = ProxyLoss.config_keys + ("temperature",)

    def __init__(self, num_classes, temperature=0.05, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size",
                 name="normalized_softmax", dtype=None):
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)
        self.temperature = _hyper.positive("temperature", temperature)

    def compute_terms(self, matrix, pairs):
        return ops.softmax_cross_entropy(matrix, pairs.labels, scale=1.0 / self.temperature)
