"""The rankings `keras-dml evaluate --rerank` measures, one metrics row each, as a table.

`--rerank` takes several methods, separated by spaces (a method's own options are
separated by commas: `qe:n=2,mutual=0`), and `none` for the exact ranking. The exact
ranking is always measured; the first method given is the primary one, whose
ranking the per-class table and the report's failure sections show.
"""

import dataclasses
import time

__all__ = ["EXACT", "Ranking", "measure", "rankings", "table"]

EXACT = "none"  # the --rerank name of the exact ranking
_TITLE = "exact ranking"
_SHORT = {"r_precision": "RP", "map@r": "MAP@R", "map": "mAP"}


@dataclasses.dataclass
class Ranking:
    """One ranking measured: its `--rerank` method (`"none"`: exact), its title in the
    table, whether it is the primary one, its `RetrievalReport` and its seconds."""

    method: str
    primary: bool = False
    report: object = None
    seconds: float = 0.0

    @property
    def title(self):
        return _TITLE if self.method == EXACT else self.method


def rankings(methods):
    """The `Ranking`s to measure for `--rerank` `methods` (None: the exact one only),
    in the order given, the exact ranking first when not given; the first given is
    the primary one.

    Raises:
        ValueError: An unknown method, bad options, or a method given twice.
    """
    from keras_dml.index import rerank

    methods = list(methods or [EXACT])
    for method in methods:
        if methods.count(method) > 1:
            raise ValueError(f"--rerank lists {method!r} twice.")
        if method != EXACT:
            try:
                rerank.get(method)  # a bad name fails before any embedding
            except ValueError as error:
                raise ValueError(f"--rerank {method}: {error} ('{EXACT}' is the exact "
                                 "ranking; separate several methods by spaces).") from None
    chosen = [Ranking(method, primary=position == 0) for position, method in
              enumerate(methods)]
    return chosen if EXACT in methods else [Ranking(EXACT), *chosen]


def measure(data, ks, chosen):
    """Fills each of the `chosen` `Ranking`s' report and seconds on `data` (an
    `EvaluationData`). Beside re-rankings the exact ranking runs twice and its second
    time counts: the first pays the search's one-off start-up costs."""
    from keras_dml.evaluation.query_gallery import retrieval_report

    if len(chosen) > 1:
        retrieval_report(*data.arrays(), ks=ks, **data.exclusions())
    for ranking in chosen:
        started = time.perf_counter()
        ranking.report = retrieval_report(
            *data.arrays(), ks=ks, rerank=None if ranking.method == EXACT else ranking.method,
            **data.exclusions())
        ranking.seconds = time.perf_counter() - started


def table(chosen):
    """The terminal table's lines: one row per ranking (metrics in %, and the extra
    milliseconds per query over the exact ranking)."""
    keys = [key for key in chosen[0].report.metrics if not key.startswith("num_")]
    names = [_SHORT.get(key, key.replace("recall", "R").replace("precision", "P"))
             for key in keys]
    width = max(len("ranking"), *(len(r.title) for r in chosen))
    exact = next(r for r in chosen if r.method == EXACT)
    queries = max(exact.report.metrics["num_queries"], 1)
    lines = [f"{'ranking':<{width}} " + " ".join(f"{n:>6}" for n in names)
             + "  ms/query extra"]
    for ranking in chosen:
        metrics = ranking.report.metrics
        extra = ("" if ranking is exact else
                 f"{1000 * (ranking.seconds - exact.seconds) / queries:+.2f}")
        lines.append(f"{ranking.title:<{width}} "
                     + " ".join(f"{100 * metrics[key]:>6.1f}" for key in keys)
                     + f"  {extra:>8}".rstrip())
    return lines
