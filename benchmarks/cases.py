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
    full_only: tuple = ()  # systems timed in full runs only (a slow build, e.g. compiling)

    def timing(self, mode):
        """(rounds, warm-up runs, runs per sample) of the case in `mode`."""
        if mode == "smoke":
            return self.repeats.get(mode, 1), 0, 1
        return self.repeats.get(mode, 1), 1, self.inner

    def runs_in(self, mode):
        """False for a case too slow for `mode` (no sizes for it)."""
        return mode in self.sizes

    def systems_for(self, mode):
        """{name: (factory, kwargs)} at the sizes of `mode`."""
        size = self.sizes[mode]
        return {name: (factory, {**kwargs, **size})
                for name, (factory, kwargs) in self.systems.items()
                if mode == "full" or name not in self.full_only}

    @property
    def key(self):
        return f"{self.group}/{self.name}"


# calls per sample for millisecond loss units: a turn's first, cold call does not set it
_LOSS_CALLS = 10
_LOSS_SIZES = {"full": {"n": 1024}, "quick": {"n": 1024}, "smoke": {"n": 32, "d": 16}}
_SLOW_PEER_SIZES = {**_LOSS_SIZES, "quick": {"n": 512}}


def _loss_case(name, ours, peer, target, floor=False, same_value=True, sizes=None,
               slow_peer=False, xla=False, **common):
    """`ours` = (loss, config[, miner, miner_config]), `peer` = (PML loss, config, miner,
    miner_config); `floor`: time the bare similarity matmul too (True, or the
    `matmul_floor` kwargs); `sizes` replaces the default N = 1024; `slow_peer`: one
    call per round and fewer rounds (a peer call of seconds); `xla`: keras_dml's step
    compiled with XLA (`jit_compile=True`, as `compile(jit_compile=True)` does), the
    peer unchanged; `common` goes to both sides."""
    loss, config, *mined = ours
    pml_loss, pml_config, miner, miner_config = peer
    if xla:
        name += ", keras_dml with jit_compile=True"
    systems = {
        "keras_dml": (f"{TF}:loss_step", {"loss": loss, "config": config, **common,
                                          **({"jit_compile": True} if xla else {}),
                                          **dict(zip(("miner", "miner_config"), mined))}),
        "peer": (f"{TORCH}:loss_step", {"loss": pml_loss, "config": pml_config,
                                        "miner": miner, "miner_config": miner_config,
                                        **common}),
    }
    if floor:
        systems["floor"] = (f"{TF}:matmul_floor",
                            {**common, **(floor if isinstance(floor, dict) else {})})
    return Case("losses", name, systems, sizes or _LOSS_SIZES, target,
                inner=1 if slow_peer else _LOSS_CALLS,
                per_call="forward + backward, d = 512, C x 4",
                repeats={"full": 5, "quick": 3} if slow_peer else {"full": 15, "quick": 7},
                same_value=same_value)


def _proxy_case(name, ours, peer, same_value=False, floor=False):
    """A proxy loss with C = 100 classes: gradients w.r.t. the embeddings and the proxies
    on both sides; random proxies on each side, so the values differ."""
    return _loss_case(f"{name} (C = 100)", (ours[0], {"num_classes": 100, **ours[1]}),
                      (peer[0], {"num_classes": 100, **peer[1]}, None, None), 0.7,
                      same_value=same_value, classes=100, floor=floor and {"keys": 100})


def _sampler_case(classes_per_batch, samples_per_class):
    design = {"classes_per_batch": classes_per_batch, "samples_per_class": samples_per_class}
    return Case(
        "data", f"C x k index batches, {classes_per_batch} x {samples_per_class}, "
                "SOP-sized labels vs PML MPerClassSampler",
        {"keras_dml": (f"{TF}:sampler_epoch", design),
         "peer": (f"{TORCH}:sampler_epoch", design)},
        {"full": {}, "quick": {}, "smoke": {"samples": 600, "classes": 120}},
        target=1.0, unit="ms", per_call="one epoch of index batches (59,551 samples)",
        repeats={"full": 9, "quick": 5})


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
    _loss_case("Triplet hard (batch hard)", ("Triplet", {"mining": "hard", "margin": 0.1}),
               ("TripletMarginLoss", {"margin": 0.1, "distance": "CosineSimilarity"},
                "BatchHardMiner", {"distance": "CosineSimilarity"}), 0.7),
    # PML averages over the triplets with a non-zero loss only (AvgNonZeroReducer)
    _loss_case("Triplet (all triplets)", ("Triplet", {"margin": 0.1}),
               ("TripletMarginLoss", {"margin": 0.1, "distance": "CosineSimilarity"},
                None, None), 0.7, same_value=False),
    # PML's LiftedStructureLoss builds a (positive pairs x negative pairs) matrix: 12.8 GB
    # at N = 1024 (C x 4), and at N = 512 one PML call takes minutes and 7.5 GB here, so
    # N = 256 in every mode. The lifted structure values differ (each library's own
    # averaging; same pairs and terms).
    _loss_case("LiftedStructure (N = 256)", ("LiftedStructure", None),
               ("LiftedStructureLoss", {"neg_margin": 1.0}, None, None), 0.7,
               same_value=False, slow_peer=True,
               sizes={"full": {"n": 256}, "quick": {"n": 256}, "smoke": {"n": 32, "d": 16}}),
    _loss_case("GeneralizedLiftedStructure", ("GeneralizedLiftedStructure",
                                              {"metric": "euclidean"}),
               ("GeneralizedLiftedStructureLoss", {"neg_margin": 1.0, "pos_margin": 0.0},
                None, None), 0.7, same_value=False),
    _loss_case("NCA", ("NCA", {"scale": 2.0}), ("NCALoss", {"softmax_scale": 1}, None, None),
               0.7),
    # PML's HistogramLoss takes about 10 s a call at N = 1024 here: fewer rounds, and
    # N = 512 in --quick (the two slowest peers took half of a 108-minute quick run)
    _loss_case("Histogram (100 bins; N = 512 in --quick)", ("Histogram", {"bins": 101}),
               ("HistogramLoss", {"n_bins": 100}, None, None), 0.7, slow_peer=True,
               sizes=_SLOW_PEER_SIZES),
    # random on both sides: distance weighted sampling draws the negatives
    _loss_case("Margin + distance weighted sampling",
               ("Margin", None, "DistanceWeighted", {"seed": 0}),
               ("MarginLoss", {"margin": 0.2, "beta": 1.2, "learn_beta": True},
                "DistanceWeightedMiner", {"cutoff": 0.5, "nonzero_loss_cutoff": 1.4}), 0.7,
               same_value=False),
    _loss_case("NPair N-pair-mc", ("NPair", {"l2_penalty": 0.0, "metric": "cosine",
                                              "tuples": "one_per_class"}),
               ("NPairsLoss", None, None, None), 0.7),
    # Proxy losses: gradients w.r.t. the proxies too on both sides. PML's ProxyNCA keeps the
    # positive proxy in the softmax's denominator, the paper (keras_dml) does not (same
    # work). keras_dml's SoftTriple also computes the centre regulariser, which PML omits:
    # tau = 0 is the like-for-like row.
    _proxy_case("ProxyAnchor", ("ProxyAnchor", {}),
                ("ProxyAnchorLoss", {"margin": 0.1, "alpha": 32})),
    _proxy_case("ProxyNCA", ("ProxyNCA", {}), ("ProxyNCALoss", {}), floor=True),
    _proxy_case("SoftTriple, 10 centres", ("SoftTriple", {"centers_per_class": 10}),
                ("SoftTripleLoss", {"centers_per_class": 10, "la": 20, "gamma": 0.1,
                                    "margin": 0.01})),
    _proxy_case("SoftTriple, 10 centres, tau = 0",
                ("SoftTriple", {"centers_per_class": 10, "tau": 0.0}),
                ("SoftTripleLoss", {"centers_per_class": 10, "la": 20, "gamma": 0.1,
                                    "margin": 0.01})),
    _proxy_case("NormalizedSoftmax", ("NormalizedSoftmax", {}),
                ("NormalizedSoftmaxLoss", {"temperature": 0.05})),
    # The ArcFace family: gradients w.r.t. the embeddings and the class weights
    # on both sides; C = 256 classes, random weights on both sides (values differ).
    # Then the same three with keras_dml's step under XLA: in TensorFlow's graph their
    # elementwise passes run one kernel each, which XLA fuses (README, Benchmarks).
    *[_loss_case(name, (loss, {"num_classes": 256}), (loss + "Loss", {"num_classes": 256},
                                                      None, None),
                 0.7, same_value=False, xla=xla, floor=False if xla else {"keys": keys})
      for xla in (False, True)
      for name, loss, keys in [("ArcFace", "ArcFace", 256), ("CosFace", "CosFace", 256),
                               ("SubCenterArcFace (3 sub-centres)", "SubCenterArcFace", 768)]],
    _loss_case("Circle", ("Circle", None), ("CircleLoss", None, None, None), 0.7),
    _loss_case("SupervisedContrastive", ("SupervisedContrastive", None),
               ("SupConLoss", None, None, None), 0.7),
    # NT-Xent's batches are two views per instance (SimCLR): 512 instances x 2. With 4
    # samples per label PML's NTXentLoss held 24 GB at N = 1024 and was OOM-killed here;
    # with 2 it takes about 25 s a call: N = 512 (256 instances) in --quick.
    _loss_case("NTXent (N / 2 instances x 2 views; N = 512 in --quick)", ("NTXent", None),
               ("NTXentLoss", None, None, None), 0.7, samples_per_class=2, slow_peer=True,
               sizes=_SLOW_PEER_SIZES),
    # PML's SmoothAPLoss builds N x N x N tensors (4.3 GB each at N = 1024): N = 256. Its
    # values differ for C != k (it groups blocks of C rows; tests/test_losses_cases.py).
    Case("losses", "SmoothAP (N = 256)",
         {"keras_dml": (f"{TF}:loss_step", {"loss": "SmoothAP"}),
          "peer": (f"{TORCH}:loss_step", {"loss": "SmoothAPLoss"})},
         {"full": {"n": 256}, "quick": {"n": 256}, "smoke": {"n": 16, "d": 16}}, 0.7,
         inner=_LOSS_CALLS, per_call="forward + backward, d = 512, C x 4",
         repeats={"full": 15, "quick": 7}),
    Case("losses", "MultipleNegativesRanking vs the torch two-liner",
         {"keras_dml": (f"{TF}:loss_step", {"loss": "MultipleNegativesRanking",
                                            "samples_per_class": 1}),
          "peer": (f"{TORCH}:multiple_negatives_ranking", {"samples_per_class": 1}),
          "floor": (f"{TF}:matmul_floor", {"samples_per_class": 1, "halves": True})},
         _LOSS_SIZES, 0.7, inner=_LOSS_CALLS,
         per_call="forward + backward, N (query | positive) rows",
         repeats={"full": 15, "quick": 7}, same_value=True),
    _sampler_case(90, 2),
    _sampler_case(32, 4),
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


# --backends: keras_dml on each Keras backend beside PML on the same device (issue 49).

#: the worker module of each Keras backend: it sets KERAS_BACKEND before Keras is imported
BACKENDS = {"tensorflow": "benchmarks.on_tensorflow", "jax": "benchmarks.on_jax",
            "torch": "benchmarks.on_torch"}
#: keras_dml's loss step on PyTorch under torch.compile: a system of its own (full runs)
TORCH_COMPILED = "torch_compiled"
BACKEND_LOSS_SIZES = (1024, 8192)

# (keras_dml loss, its config, the PML peer (loss, config, miner, miner_config) or None,
#  classes: the labels modulo the loss's class count, so N = 8,192 stays within it): ICE
#  has no PML loss, its row times the backends only.
BACKEND_LOSSES = {
    "MultiSimilarity + VTHM mining": ("MultiSimilarity", None, (
        "MultiSimilarityLoss", {"alpha": 2, "beta": 50, "base": 0.5},
        "MultiSimilarityMiner", {"epsilon": 0.1}), None),
    "InstanceCrossEntropy": ("InstanceCrossEntropy", None, None, None),
    "ProxyAnchor (C = 100)": ("ProxyAnchor", {"num_classes": 100}, (
        "ProxyAnchorLoss", {"num_classes": 100, "margin": 0.1, "alpha": 32}, None, None), 100),
    "Contrastive (cosine)": ("Contrastive", None, (
        "ContrastiveLoss", {"pos_margin": 1.0, "neg_margin": 0.5,
                            "distance": "CosineSimilarity"}, None, None), None),
    "ArcFace (C = 256)": ("ArcFace", {"num_classes": 256}, (
        "ArcFaceLoss", {"num_classes": 256}, None, None), 256),
}


def _on_backends(backends, function, kwargs):
    return {backend: (f"{BACKENDS[backend]}:{function}", kwargs) for backend in backends}


def _backend_loss_case(name, n, backends):
    """One loss at batch size `n` on every backend (PyTorch also under torch.compile in
    full runs), beside its PML peer. N = 8,192 runs in full runs only, one call a round."""
    loss, config, peer, classes = BACKEND_LOSSES[name]
    ours = {"loss": loss, "config": config, "classes": classes}
    systems = _on_backends(backends, "loss_step", ours)
    if "torch" in backends:
        systems[TORCH_COMPILED] = (f"{BACKENDS['torch']}:loss_step",
                                   {**ours, "jit_compile": True})
    if peer is not None:
        pml_loss, pml_config, miner, miner_config = peer
        systems["peer"] = (f"{TORCH}:loss_step", {
            "loss": pml_loss, "config": pml_config, "miner": miner,
            "miner_config": miner_config, "classes": classes})
    large = n > 1024
    sizes = {"full": {"n": n}, "smoke": {"n": 32, "d": 16}}
    if not large:
        sizes["quick"] = {"n": n}
    return Case("backends", f"{name}, N = {n:,}", systems, sizes,
                unit="s" if large else "ms", inner=1 if large else 5,
                per_call="forward + backward, d = 512, C x 4",
                repeats={"full": 5} if large else {"full": 9, "quick": 3},
                full_only=(TORCH_COMPILED,))


def backend_cases(backends):
    """The `--backends` suite on `backends` ("tensorflow", "jax", "torch"): each system
    named after its backend ("torch_compiled": PyTorch under torch.compile), "peer" the
    PML (PyTorch) twin on the same device where there is one."""
    backends = [b for b in BACKENDS if b in backends]
    found = [
        Case("backends", "main job step (cnn3 32 + 128-d head, ICE, 32 x 4)",
             _on_backends(backends, "main_job_step", {}),
             {"full": {"steps": 20}, "quick": {"steps": 5}, "smoke": {"steps": 2}},
             unit="s", per_call="`steps` fit steps, NumPy C x k stream",
             repeats={"full": 7, "quick": 3}),
        Case("backends", "main job network + MultiSimilarity vs PML twin",
             {**_on_backends(backends, "main_job_step", {"loss": "MultiSimilarity"}),
              "peer": (f"{TORCH}:omniglot_train", {"width": 32, "bundled": True})},
             {"full": {"steps": 20}, "quick": {"steps": 5}, "smoke": {"steps": 2}},
             unit="s", per_call="`steps` training steps",
             repeats={"full": 7, "quick": 3}),
    ]
    found += [_backend_loss_case(name, n, backends)
              for n in BACKEND_LOSS_SIZES for name in BACKEND_LOSSES]
    found.append(Case(
        "backends", "exact kNN, all against all, k = 101 vs PML CustomKNN",
        {**_on_backends(backends, "nearest_neighbors", {}),
         "peer": (f"{TORCH}:nearest_neighbors", {})},
        {"full": {"n": 20000, "d": 512}, "quick": {"n": 5000, "d": 512},
         "smoke": {"n": 300, "d": 8, "classes": 50}},
        unit="s", per_call="search of n x 512 unit vectors", repeats={"full": 5, "quick": 3}))
    return found
