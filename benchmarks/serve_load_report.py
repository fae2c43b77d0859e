"""The figures of `benchmarks/serve_load.py`: per-run summaries, targets and the table."""

import numpy as np

__all__ = ["markdown", "memory", "summarize", "targets"]


def memory(samples):
    """Resident memory over a run from ``(seconds, MB)`` samples: first, last, peak and
    the least-squares slope in MB per minute (flat: near 0)."""
    if not samples:
        return None
    seconds, mb = np.array(samples, dtype=np.float64).T
    slope = float(np.polyfit(seconds, mb, 1)[0] * 60) if len(samples) > 2 else 0.0
    return {"first_mb": round(float(mb[0]), 1), "last_mb": round(float(mb[-1]), 1),
            "max_mb": round(float(mb.max()), 1), "slope_mb_per_min": round(slope, 2),
            "samples": len(samples)}


def summarize(measured, rss):
    """Requests, requests/s, latency percentiles (ms), errors and memory of one run;
    ``measured`` holds ``latencies_ms``, ``window_s``, ``errors``, and may hold the
    service's own ``took_ms`` and the glue's ``components``."""
    latencies = np.asarray(measured["latencies_ms"], dtype=np.float64)
    window = measured["window_s"]
    summary = {"requests": int(latencies.size), "seconds": round(window, 1),
               "requests_per_s": round(latencies.size / window, 2) if window else 0.0,
               "errors": int(measured["errors"]),
               "error_messages": measured.get("error_messages", []),
               "warmup_requests": measured.get("warmup_requests", 0), "memory": memory(rss)}
    if latencies.size:
        p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
        summary.update(p50_ms=round(float(p50), 1), p95_ms=round(float(p95), 1),
                       p99_ms=round(float(p99), 1),
                       mean_ms=round(float(latencies.mean()), 1))
    if measured.get("took_ms"):
        summary["service_p50_ms"] = round(float(np.median(measured["took_ms"])), 1)
    if measured.get("components"):
        summary["components"] = measured["components"]
    return summary


def _find(runs, system, clients):
    return next((run for run in runs if run["system"] == system and run["clients"] == clients),
                None)


def targets(runs):
    """The issue's targets, each ``{"target", "measured", "met"}`` (None when not run)."""
    floor = _find(runs, "glue script", 1)
    served = [run for run in runs if run["system"] == "keras-dml serve"]
    one, eight = _find(runs, "keras-dml serve", 1), _find(runs, "keras-dml serve", 8)
    rows = [{"target": "0 errors", "measured": f"{sum(run['errors'] for run in runs)} errors "
             f"in {sum(run['requests'] for run in runs)} requests",
             "met": all(run["errors"] == 0 for run in runs)}]
    if floor and one and "p50_ms" in one:
        ratio = one["p50_ms"] / floor["p50_ms"]
        rows.append({"target": "1 client: latency <= 1.2x the glue script's",
                     "measured": f"p50 {one['p50_ms']} ms / {floor['p50_ms']} ms = "
                     f"{ratio:.2f}x (mean {one['mean_ms'] / floor['mean_ms']:.2f}x)",
                     "met": ratio <= 1.2})
    if floor and eight:
        ratio = eight["requests_per_s"] / floor["requests_per_s"]
        rows.append({"target": "8 clients: throughput >= 2x the glue script's",
                     "measured": f"{eight['requests_per_s']} / {floor['requests_per_s']} "
                     f"req/s = {ratio:.2f}x", "met": ratio >= 2.0})
    slopes = [(run["clients"], run["memory"]) for run in served if run["memory"]]
    if slopes:
        growth = [f"{clients} clients {m['slope_mb_per_min']:+.1f} MB/min "
                  f"({m['first_mb']:.0f} -> {m['last_mb']:.0f} MB)" for clients, m in slopes]
        rows.append({"target": "memory flat (slope under 1 % of RSS a minute)",
                     "measured": "; ".join(growth),
                     "met": all(abs(m["slope_mb_per_min"]) < 0.01 * m["first_mb"]
                                for _, m in slopes)})
    return rows


def _cell(value):
    return "-" if value is None else str(value)


def markdown(report):
    """The runs as a markdown table, then the targets and the update under load."""
    lines = ["| system | clients | seconds | requests | req/s | p50 ms | p95 ms | p99 ms "
             "| errors | in service p50 ms | mean batch | RSS MB first -> last (max), slope |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for run in report["runs"]:
        m = run["memory"]
        rss = (f"{m['first_mb']:.0f} -> {m['last_mb']:.0f} ({m['max_mb']:.0f}), "
               f"{m['slope_mb_per_min']:+.1f} MB/min") if m else "-"
        lines.append(f"| {run['system']} | {run['clients']} | {run['seconds']} | "
                     f"{run['requests']} | {run['requests_per_s']} | {_cell(run.get('p50_ms'))} "
                     f"| {_cell(run.get('p95_ms'))} | {_cell(run.get('p99_ms'))} | "
                     f"{run['errors']} | {_cell(run.get('service_p50_ms'))} | "
                     f"{_cell(run.get('mean_batch'))} | {rss} |")
    parts = [run["components"] for run in report["runs"] if run.get("components")]
    if parts:
        lines += ["", f"The glue script's halves (medians): SavedModel (decode, preprocessing, "
                  f"forward pass) {parts[0]['savedmodel_ms']} ms, Milvus search "
                  f"{parts[0]['milvus_search_ms']} ms."]
    lines += ["", "| target | measured | met |", "| --- | --- | --- |"]
    lines += [f"| {row['target']} | {row['measured']} | {'yes' if row['met'] else 'NO'} |"
              for row in report["targets"]]
    update = report.get("update")
    if update and "error" in update:
        lines += ["", f"`keras-dml index --update` during the load run failed: {update['error']}"]
    elif update:
        lines += ["", f"`keras-dml index --update` during the {update['clients']}-client run: "
                  f"{update['added']} new photos, collection {update['count_before']} -> "
                  f"{update['count_after']} items in {update['seconds']:.1f} s; "
                  f"{update['found']}/{update['checked']} new photos answered with "
                  f"themselves first through the service; removed again: "
                  f"{update.get('count_removed', '-')} items."]
    steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report["steps"].items())
    lines += ["", f"Steps: {steps}. Catalogue: {report['collection_count']} items."]
    return "\n".join(lines) + "\n"
