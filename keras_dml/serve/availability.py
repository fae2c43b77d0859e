"""How the service answers while Milvus fails: a 503 with `Retry-After`, in bounded time.

Readiness is the catalogue's check (`keras_dml.serve.catalogue.Catalogue.refresh`),
run in a worker thread: a request waits for it at most the catalogue's `timeout`
(the check may go on, and its outcome serves the next requests). `/healthz` never
comes here: it answers whatever Milvus does.
"""

import asyncio
import math

from fastapi import HTTPException

from keras_dml.serve.errors import LOGGER, request_id

__all__ = ["ensure_ready", "retry_later"]


def retry_later(detail, retry_after):
    """A 503 saying `detail`, with `Retry-After` of `retry_after` seconds (at least 1)."""
    return HTTPException(503, detail,
                         headers={"Retry-After": str(max(1, math.ceil(retry_after)))})


async def ensure_ready(catalogue, request):
    """Returns when a search can run on `catalogue` now; else raises a 503 saying why
    (what failed inside, which may name the Milvus URI, goes to the log under the
    request's id)."""
    retry = catalogue.refresh_seconds
    try:
        await asyncio.wait_for(asyncio.to_thread(catalogue.refresh), catalogue.timeout)
    except asyncio.TimeoutError:
        raise retry_later(f"the catalogue did not answer within {catalogue.timeout:g} s; "
                          "retry later.", retry) from None
    except (ConnectionError, RuntimeError, FileNotFoundError) as error:
        LOGGER.warning("request %s: %s %s: 503: %s: %s", request_id(request), request.method,
                       request.url.path, type(error).__name__, error)
        raise retry_later("the catalogue is unavailable (Milvus cannot be reached or "
                          "cannot search it now); retry later.", retry) from None
    if catalogue.not_ready:
        raise retry_later(catalogue.not_ready, retry)
