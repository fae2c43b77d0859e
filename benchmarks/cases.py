"""The benchmark cases `python -m benchmarks` runs: systems, sizes per mode, targets.

A case names its systems as (factory, kwargs) pairs for `benchmarks.worker`:
"keras_dml" and its "peer" (and sometimes the bare matmul "floor"). Sizes come
per mode: "full" (the figures in benchmarks/README.md), "quick" (a few minutes
in all) and "smoke" (tiny: only checks that every case still runs). The ratio
is keras_dml's median time over the peer's; below 1 keras_dml is faster.
"""

import dataclasses

TF = "benchmarks.tf_systems"
TORCH = "benchmarks.torch_systems"
FAISS = "benchmarks.faiss_systems"


@dataclasses.dataclass
class Case:
    group: str
    name: str
    systems: dict  # {"keras_dml" | "peer" | "floor": (factory, kwargs)}
    sizes: dict  # {mode: kwargs merged into every system's kwargs}
    target: float = None  # highest acceptable keras_dml / peer time ratio
    unit: str = "ms"
    per_call: str = ""  # what one timed call is, for the table
    repeats: dict = dataclasses.field(default_factory=lambda: {"full": 9, "quick": 5})
    inner: int = 1  # calls per sample (their median), for millisecond units
    same_value: bool = False  # both sides compute the same number (checked by the tests)

    def systems_for(self, mode):
        size = self.sizes[mode]
        return {name: (factory, {**kwargs, **size})
                for name, (factory, kwargs) in self.systems.items()}

    @property
    def key(self):
        return f"{self.group}/{self.name}"


_LOSS_SIZES = {"full": {"n": 1024}, "quick": {"n": 1024}, "smoke": {"n": 32, "d": 16}}


def _loss_case(name, ours, peer, target, floor=False, same_value=True):
    loss, config = ours
    pml_loss, pml_config, miner, miner_config = peer
    systems = {
        "keras_dml": (f"{TF}:loss_step", {"loss": loss, "config": config}),
        "peer": (f"{TORCH}:loss_step", {"loss": pml_loss, "config": pml_config,
                                        "miner": miner, "miner_config": miner_config}),
    }
    if floor:
        systems["floor"] = (f"{TF}:matmul_floor", {})
    return Case("losses", name, systems, _LOSS_SIZES, target, inner=3,
                per_call="forward + backward, d = 512, C x 4",
                repeats={"full": 15, "quick": 7}, same_value=same_value)


def _knn_case(name, n, d, quick_n, leave_one_out=False):
    ours = {"k": 100 if leave_one_out else 101, "leave_one_out": leave_one_out}
    return Case(
        "retrieval", name,
        {"keras_dml": (f"{TF}:nearest_neighbors", ours),
         "peer": (f"{FAISS}:flat_ip", {"k": 101})},
        {"full": {"n": n, "d": d}, "quick": {"n": quick_n, "d": d},
         "smoke": {"n": 300, "d": 8, "classes": 50}},
        target=1.0, unit="s", per_call="all-vs-all exact search",
        repeats={"full": 5, "quick": 3})


CASES = [
    _loss_case("MultiSimilarity + VTHM mining", ("MultiSimilarity", None),
               ("MultiSimilarityLoss", {"alpha": 2, "beta": 50, "base": 0.5},
                "MultiSimilarityMiner", {"epsilon": 0.1}), 0.5, floor=True),
    _loss_case("Contrastive (cosine)", ("Contrastive", None),
               ("ContrastiveLoss", {"pos_margin": 1.0, "neg_margin": 0.5,
                                    "distance": "CosineSimilarity"}, None, None), 0.7,
               same_value=False),  # PML averages over the non-zero terms only
    _loss_case("Triplet semi-hard", ("Triplet", {"mining": "semihard", "margin": 0.1}),
               ("TripletMarginLoss", {"margin": 0.1, "distance": "CosineSimilarity"},
                "TripletMarginMiner", {"margin": 0.1, "type_of_triplets": "semihard",
                                       "distance": "CosineSimilarity"}), 0.7,
               same_value=False),  # semi-hard is defined differently (README)
    _loss_case("NCA", ("NCA", {"scale": 2.0}), ("NCALoss", {"softmax_scale": 1}, None, None),
               0.7),
    _loss_case("NPair N-pair-mc", ("NPair", {"l2_penalty": 0.0, "metric": "cosine",
                                              "tuples": "one_per_class"}),
               ("NPairsLoss", None, None, None), 0.7),
    _knn_case("exact kNN 20,000 x 512, k = 101 vs faiss IndexFlatIP", 20000, 512, 10000),
    _knn_case("exact kNN 100,000 x 128, k = 101 vs faiss IndexFlatIP", 100000, 128, 30000),
    Case("retrieval", "P@1, R-Precision, MAP@R on 20,000 x 512 vs PML AccuracyCalculator",
         {"keras_dml": (f"{TF}:retrieval_metrics", {}),
          "peer": (f"{TORCH}:accuracy_calculator", {})},
         {"full": {"n": 20000}, "quick": {"n": 10000},
          "smoke": {"n": 300, "d": 8, "classes": 50}},
         target=1.0, unit="s", per_call="leave-one-out metrics",
         repeats={"full": 5, "quick": 3}),
    Case("training", "Omniglot recipe: train steps (MultiSimilarity, 32 x 4, Adam)",
         {"keras_dml": (f"{TF}:omniglot_train", {}),
          "peer": (f"{TORCH}:omniglot_train", {})},
         {"full": {"steps": 50}, "quick": {"steps": 20}, "smoke": {"steps": 1}},
         target=1 / 1.3, unit="s", per_call="`steps` training steps incl. input pipeline",
         repeats={"full": 7, "quick": 3}),
    Case("training", "Omniglot recipe: evaluation (embed 13,180 + leave-one-out metrics)",
         {"keras_dml": (f"{TF}:omniglot_evaluate", {}),
          "peer": (f"{TORCH}:omniglot_evaluate", {})},
         {"full": {}, "quick": {}, "smoke": {"limit": 200}},
         target=1 / 1.3, unit="s", per_call="embedding + metrics",
         repeats={"full": 7, "quick": 3}),
]
