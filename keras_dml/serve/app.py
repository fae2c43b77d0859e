"""The FastAPI application of `keras-dml serve`: `create_app(model, uri, ...)`.

Routes: `POST /search` (an uploaded image or a JSON vector), `GET /healthz`,
`GET /readyz`, `GET /` (the search page), `GET /images/{id}` (catalogue
images, from under the catalogue's root only), `GET /stats` (the batcher's
batch sizes), `POST /admin/reload` (load the model again after an alias
moved to another model's collection) and the OpenAPI page `/docs`. Every
refusal is a 4xx JSON answer `{"detail": "one line"}`; with a token, every
route but the health checks, the page and the API docs wants
`Authorization: Bearer TOKEN` (or `X-Token: TOKEN`).
"""

import asyncio
import contextlib
import hmac
import json
import math
import time

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Query as QueryParam, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from keras_dml.serve import files
from keras_dml.serve.availability import ensure_ready, unavailable
from keras_dml.serve.embedders import calibrated_threshold
from keras_dml.serve.page import PAGE
from keras_dml.serve.service import Query, Service
from keras_dml.serve.uploads import ImageLimits, UploadError, check_image

__all__ = ["MAX_K", "MILVUS_TIMEOUT", "create_app"]

MAX_K = 100  # results per query at most
MILVUS_TIMEOUT = 3.0  # seconds any one call to Milvus may take
FORM_OVERHEAD = 64 * 1024  # bytes a multipart body may hold besides the image

SEARCH_BODY = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["image"], "properties": {
        "image": {"type": "string", "format": "binary", "description": "the photo (JPEG, "
                  "PNG, GIF, BMP or WebP)"}}}},
    "application/json": {"schema": {"type": "object", "required": ["vector"], "properties": {
        "vector": {"type": "array", "items": {"type": "number"},
                   "description": "an embedding of the catalogue's dimension"}}}}}}}


def _one_line(error):
    return " ".join(str(error).split()) or type(error).__name__


def create_app(model, uri, collection=None, token=None, milvus_token=None, max_batch=32,
               max_wait_ms=5.0, limits=ImageLimits(), threshold=None, allow_mismatch=False,
               refresh_seconds=2.0, milvus_timeout=MILVUS_TIMEOUT):
    """The service's FastAPI app, its model loaded and checked against the catalogue.

    Args:
        model: A SavedModel export, a run directory, a `.keras` file or a pretrained
            backbone's name (`keras_dml.serve.embedders.load_embedder`), or a
            `keras_dml.serve.embedders.Embedder`.
        uri: The Milvus URI (a Lite `.db` folder or `http(s)://`).
        collection: Collection or alias; defaults to keras_dml's collection name.
        token: The service's token (None: no token asked).
        milvus_token: The Milvus server's token.
        max_batch, max_wait_ms: The micro-batcher's bounds.
        limits: Upload bounds (`keras_dml.serve.uploads.ImageLimits`).
        threshold: Similarity at which a result matches; defaults to the run's
            calibrated threshold where it has one, else no match decision.
        allow_mismatch: Serve another model's catalogue (its scores are meaningless).
        refresh_seconds: How often what a search needs is checked again (Milvus
            answering, the alias' target, the collection loaded), healing what failed.
        milvus_timeout: Seconds any one call to Milvus may take; a request then gets a
            503 with Retry-After.

    Raises:
        ValueError: The catalogue was built by another model (one line naming both).
        FileNotFoundError, ConnectionError: No model or catalogue there.
    """
    service = Service(model, uri, collection, milvus_token, allow_mismatch, refresh_seconds,
                      max_batch, max_wait_ms / 1000, milvus_timeout)
    if threshold is None and service.embedder.run_dir is not None:
        threshold = calibrated_threshold(service.embedder.run_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await service.batcher.close()
        service.close()

    app = FastAPI(title="keras-dml serve", lifespan=lifespan,
                  description="Visual search over a keras_dml catalogue: POST a photo to "
                  "/search, get the most similar catalogue items.")
    app.state.service, app.state.threshold, app.state.limits = service, threshold, limits
    guard = [Depends(_token_guard(token))]
    _add_handlers(app)
    _add_health(app, service)
    _add_search(app, service, guard)
    _add_pages(app, service, guard)
    return app


def _token_guard(token):
    def check(request: Request):
        if token is None:
            return
        given = request.headers.get("x-token") or ""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong token: send the header "
                                "'Authorization: Bearer TOKEN'.")

    return check


def _add_handlers(app):
    @app.exception_handler(RequestValidationError)
    async def invalid(request, error):
        problems = [f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                    for e in error.errors()]
        return JSONResponse({"detail": "; ".join(problems)}, 422)

    @app.exception_handler(Exception)
    async def unexpected(request, error):
        return JSONResponse({"detail": f"internal error: {_one_line(error)}"}, 500)


def _add_health(app, service):
    @app.get("/healthz", summary="the process is up")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz", summary="the model is loaded and matches the reachable catalogue")
    async def readyz():
        await _ready(service)
        return {"status": "ready", "collection": service.catalogue.collection,
                "model_fingerprint": service.embedder.fingerprint}

    @app.get("/stats", summary="how many batches of each size the model ran")
    async def stats():
        return {"batches": {str(size): count for size, count in
                            sorted(service.batcher.sizes.items())}}


async def _ready(service):
    await ensure_ready(service.catalogue)


def _add_search(app, service, guard):
    @app.post("/search", dependencies=guard, openapi_extra=SEARCH_BODY,
              summary="the catalogue items most similar to a photo (or a vector)")
    async def search(request: Request,
                     k: str = QueryParam("10", description=f"results, 1 to {MAX_K}"),
                     filter: str = QueryParam(None, description="as keras-dml search "
                                              "--filter, e.g. 'label == \"boots\" and price "
                                              "< 20', or a JSON filter of keras_dml.index."
                                              "filters"),
                     rerank: str = QueryParam(None, description="qe, dba or k_reciprocal, "
                                              "with options as qe:n=2,alpha=3"),
                     threshold: str = QueryParam(None, description="similarity at which a "
                                                 "result matches")):
        start = time.perf_counter()
        await _ready(service)
        params = {"k": k, "filter": filter, "rerank": rerank, "threshold": threshold}
        image, vector, fields = await _read_body(request, app.state.limits)
        params.update(fields)
        query = _query(service, image, vector, params)
        limit = _threshold(params["threshold"], app.state.threshold)
        try:
            found = await service.search(query)
        except UploadError as error:
            raise HTTPException(error.status, str(error)) from None
        except ValueError as error:
            raise HTTPException(400, _one_line(error)) from None
        except (ConnectionError, RuntimeError):
            raise unavailable("the catalogue could not be searched now (Milvus failed or "
                              "did not answer); retry later.",
                              service.catalogue.refresh_seconds) from None
        root = service.catalogue.root
        return {"results": _results(found, limit, root),
                "model_fingerprint": service.embedder.fingerprint,
                "collection": service.catalogue.collection,
                "took_ms": (time.perf_counter() - start) * 1000}

    @app.post("/admin/reload", dependencies=guard,
              summary="load the model again and check it against the catalogue")
    async def reload():
        try:
            reason = await asyncio.to_thread(service.reload)
        except (ValueError, FileNotFoundError, OSError) as error:
            raise HTTPException(409, _one_line(error)) from None
        if reason is not None:
            raise HTTPException(409, reason)
        return {"status": "ready", "collection": service.catalogue.collection,
                "model_fingerprint": service.embedder.fingerprint}


async def _read_body(request, limits):
    """`(image bytes, vector, form fields)` of a search request, or a 4xx."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise HTTPException(411, "send the request with a Content-Length header.")
    if int(length) > limits.max_bytes + FORM_OVERHEAD:
        raise HTTPException(413, f"the request has {length} bytes, more than the limit of "
                            f"{limits.max_bytes} for an image.")
    kind = request.headers.get("content-type", "")
    if kind.startswith("multipart/form-data"):
        try:
            form = await request.form(max_files=1, max_fields=8)
        except Exception as error:  # starlette's MultiPartException, a broken body
            raise HTTPException(400, f"the form could not be read: {_one_line(error)}") from None
        upload = form.get("image")
        if not hasattr(upload, "read"):
            raise HTTPException(400, "the form has no file field 'image'.")
        data = await upload.read()
        try:
            check_image(data, limits)
        except UploadError as error:
            raise HTTPException(error.status, str(error)) from None
        fields = {name: form[name] for name in ("k", "filter", "rerank", "threshold")
                  if isinstance(form.get(name), str)}
        return data, None, fields
    if kind.startswith("application/json"):
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise HTTPException(400, "the JSON body could not be parsed.") from None
        if not isinstance(body, dict) or "vector" not in body:
            raise HTTPException(400, 'the JSON body must be {"vector": [numbers]}.')
        return None, body["vector"], {}
    raise HTTPException(415, "send multipart/form-data with a file field 'image', or JSON "
                        '{"vector": [...]}.')


def _query(service, image, vector, params):
    """The `Query` of a request's parameters, or a 400 naming the bad one."""
    try:
        k = int(params["k"])
    except (TypeError, ValueError):
        raise HTTPException(400, f"k must be a whole number, got {params['k']!r}.") from None
    if not 1 <= k <= MAX_K:
        raise HTTPException(400, f"k must be between 1 and {MAX_K}, got {k}.")
    if vector is not None:
        vector = _vector(vector, service.catalogue.record["provenance"].get("dim"))
    filter_dict = expression = None
    if params["filter"]:
        try:
            filter_dict = _filter(params["filter"])
            expression = service.catalogue.expression(filter_dict)
        except ValueError as error:
            raise HTTPException(400, f"bad filter: {_one_line(error)}") from None
    rerank = params["rerank"] or None
    if rerank is not None:
        from keras_dml.evaluation.rerank import get

        try:
            get(rerank)
        except ValueError as error:
            raise HTTPException(400, f"bad rerank: {_one_line(error)}") from None
    return Query(image, vector, k, expression, filter_dict, rerank)


def _filter(text):
    """A JSON filter (`keras_dml.index.filters`) or its text form, as `keras-dml search
    --filter` takes it (`label == "boots" and price < 20`)."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    from keras_dml.index.filter_expression import parse_expression

    return parse_expression(text)


def _vector(values, dim):
    try:
        vector = np.asarray(values, np.float32)
    except (TypeError, ValueError):
        raise HTTPException(400, "vector must be a list of numbers.") from None
    if vector.ndim != 1 or (dim is not None and len(vector) != dim):
        raise HTTPException(400, f"vector must be a list of {dim} numbers, got shape "
                            f"{list(vector.shape)}.")
    if not np.isfinite(vector).all():
        raise HTTPException(400, "vector must hold finite numbers.")
    return vector


def _threshold(value, default):
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise HTTPException(400, f"threshold must be a number, got {value!r}.")
    return number


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _results(found, threshold, root):
    ids, scores, labels, metadata, reranked = found
    results = []
    for rank, (item_id, score, label, meta) in enumerate(zip(ids, scores, labels, metadata)):
        if not np.isfinite(score):  # padding: fewer items passed the filter
            continue
        item_id = _plain(item_id)
        result = {"id": item_id, "label": _plain(label), "similarity": float(score),
                  "metadata": meta, "match": None if threshold is None else
                  bool(score >= threshold)}
        if reranked is not None:  # the order's score; matches stay the similarity's
            result["rerank_score"] = float(reranked[rank])
        url = files.image_url(root, item_id, meta)
        if url is not None:
            result["image_url"] = url
        results.append(result)
    return results


def _add_pages(app, service, guard):
    @app.get("/", response_class=HTMLResponse, summary="the search page")
    async def page():
        return PAGE

    @app.get("/images/{path:path}", dependencies=guard, summary="a catalogue image")
    async def image(path: str):
        found = files.image_file(service.catalogue.root, path)
        if found is None:
            raise HTTPException(404, "no catalogue image at that path.")
        return FileResponse(found)
