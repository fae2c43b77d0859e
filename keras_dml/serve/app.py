"""The FastAPI application of `keras-dml serve`: `create_app(model, uri, ...)`.

Routes: `POST /search` (an uploaded image or a JSON vector), `GET /healthz`,
`GET /readyz`, `GET /` (the search page), `GET /images/{id}` (catalogue
images, from under the catalogue's root only), `GET /stats` (the batcher's
batch sizes), `POST /admin/reload` (load the model again after an alias
moved to another model's collection) and the API's reference `/docs` (offline:
no CDN). Every refusal is a 4xx JSON answer `{"detail": "one line", "request_id":
...}`; with a token, every route but the health checks, the page and the API docs
wants `Authorization: Bearer TOKEN` (or `X-Token: TOKEN`). The middleware, outermost
first: request ids and the catch-all 500 (`errors`), the Host allow-list, cross-site
refusals and security headers (`browsers`), the body limit (`limits`).
"""

import asyncio
import contextlib
import hmac
import time

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.security import APIKeyHeader, HTTPBearer

from keras_dml.serve import files
from keras_dml.serve.browsers import BrowserGuard, page_policy
from keras_dml.serve.docs_page import docs_page
from keras_dml.serve.availability import ensure_ready
from keras_dml.serve.embedders import calibrated_threshold
from keras_dml.serve.errors import RequestIds, add_handlers, refused, unavailable
from keras_dml.serve.limits import BodyLimit, media_type, parse_json
from keras_dml.serve.page import PAGE
from keras_dml.serve.queries import (MAX_K, parse_filter, parse_k, parse_rerank,
                                     parse_threshold, parse_vector)
from keras_dml.serve.schema import errors, search_openapi
from keras_dml.serve.service import Query, Service
from keras_dml.serve.uploads import ImageLimits, UploadError, check_image

__all__ = ["MAX_K", "MILVUS_TIMEOUT", "create_app"]

MILVUS_TIMEOUT = 3.0  # seconds any one call to Milvus may take
FORM_OVERHEAD = 64 * 1024  # bytes a multipart body may hold besides the image

EVERY_ROUTE = (400, 500)  # a Host not allowed; an unexpected error


def _one_line(error):
    return " ".join(str(error).split()) or type(error).__name__


def _bad_request(error):
    """A 400 of a ValueError raised by the checks of the request (its one line)."""
    return HTTPException(400, _one_line(error))


def create_app(model, uri, collection=None, token=None, milvus_token=None, max_batch=32,
               max_wait_ms=5.0, limits=ImageLimits(), threshold=None, allow_mismatch=False,
               refresh_seconds=2.0, allowed_hosts=None,
               milvus_timeout=MILVUS_TIMEOUT):
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
        allowed_hosts: The host names answered (`Host` header, without its port;
            `keras_dml.serve.browsers.allowed_hosts` makes the CLI's list); None: any
            (also in `app.state.allowed_hosts`, read at each request).
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

    app = FastAPI(title="keras-dml serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Visual search over a keras_dml catalogue: POST a photo to "
                  "/search, get the most similar catalogue items.")
    app.state.service, app.state.threshold, app.state.limits = service, threshold, limits
    app.state.allowed_hosts = None if allowed_hosts is None else tuple(
        host.lower() for host in allowed_hosts)
    guard = [] if token is None else [Depends(_token_guard(token))]
    add_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_bytes + FORM_OVERHEAD)
    app.add_middleware(BrowserGuard, policies={"/": page_policy(PAGE),
                                               "/docs": page_policy(docs_page({}))})
    app.add_middleware(RequestIds)  # the outermost: every answer carries its request's id
    _add_health(app, service, guard)
    _add_search(app, service, guard)
    _add_pages(app, service, guard)
    return app


def _token_guard(token):
    """The dependency that checks the token (its schemes declared in the OpenAPI
    schema: a bearer token, or the X-Token header)."""
    bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer TOKEN")
    header = APIKeyHeader(name="X-Token", auto_error=False, description="X-Token: TOKEN")

    def check(request: Request, _bearer=Depends(bearer), _header=Depends(header)):
        given = request.headers.get("x-token") or ""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong token: send the header "
                                "'Authorization: Bearer TOKEN'.")

    return check


def _add_health(app, service, guard):
    @app.get("/healthz", summary="the process is up", responses=errors(*EVERY_ROUTE))
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz", summary="the model is loaded and matches the reachable catalogue",
             responses=errors(*EVERY_ROUTE, 503))
    async def readyz(request: Request):
        await _ready(service, request)
        return {"status": "ready", "collection": service.catalogue.collection,
                "model_fingerprint": service.embedder.fingerprint}

    @app.get("/stats", dependencies=guard, summary="how many batches of each size the model "
             "ran", responses=errors(*EVERY_ROUTE, 401))
    async def stats():
        return {"batches": {str(size): count for size, count in
                            sorted(service.batcher.sizes.items())}}


async def _ready(service, request):
    await ensure_ready(service.catalogue, request)


def _add_search(app, service, guard):
    dim = service.catalogue.record["provenance"].get("dim")

    @app.post("/search", dependencies=guard, openapi_extra=search_openapi(dim),
              summary="the catalogue items most similar to a photo (or a vector)",
              responses=errors(*EVERY_ROUTE, 401, 403, 411, 413, 415, 503))
    async def search(request: Request):
        start = time.perf_counter()
        await _ready(service, request)
        query_string = request.query_params  # checked by queries.parse_*; declared in schema
        params = {"k": query_string.get("k", "10"), "filter": query_string.get("filter"),
                  "rerank": query_string.get("rerank"),
                  "threshold": query_string.get("threshold")}
        image, vector, fields = await _read_body(request, app.state.limits)
        params.update(fields)
        try:
            query = _query(service, image, vector, params)
            limit = parse_threshold(params["threshold"], app.state.threshold)
        except ValueError as error:
            raise _bad_request(error) from None
        try:
            found = await service.search(query)
        except UploadError as error:
            raise HTTPException(error.status, str(error)) from None
        except ValueError as error:  # Milvus refused the search: its text is internal
            raise refused(request, error) from None
        except (ConnectionError, RuntimeError, TimeoutError) as error:  # Milvus unreachable
            raise unavailable(request, error) from None
        root = service.catalogue.root
        return {"results": _results(found, limit, root),
                "model_fingerprint": service.embedder.fingerprint,
                "collection": service.catalogue.collection,
                "took_ms": (time.perf_counter() - start) * 1000}

    @app.post("/admin/reload", dependencies=guard,
              summary="load the model again and check it against the catalogue",
              responses=errors(*EVERY_ROUTE, 401, 403, 409))
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
    length = request.headers.get("content-length", "")
    if not (length.isascii() and length.isdigit()):
        raise HTTPException(411, "send the request with a Content-Length header.")
    if int(length) > limits.max_bytes + FORM_OVERHEAD:
        raise HTTPException(413, f"the request has {length} bytes, more than the limit of "
                            f"{limits.max_bytes} for an image.")
    kind = media_type(request.headers.get("content-type", ""))
    if kind == "multipart/form-data":
        try:
            form = await request.form(max_files=1, max_fields=8)
        except HTTPException:  # limits.BodyTooLarge
            raise
        except Exception as error:  # starlette's MultiPartException, a broken body
            raise HTTPException(400, f"the form could not be read: {_one_line(error)}") from None
        upload = form.get("image")
        if not hasattr(upload, "read"):
            raise HTTPException(400, "the form has no file field 'image'.")
        data = await upload.read()
        try:  # Pillow reads the headers (an animated GIF's frames too): off the event loop
            await asyncio.to_thread(check_image, data, limits)
        except UploadError as error:
            raise HTTPException(error.status, str(error)) from None
        fields = {name: form[name] for name in ("k", "filter", "rerank", "threshold")
                  if isinstance(form.get(name), str)}
        return data, None, fields
    if kind == "application/json":
        try:
            body = await asyncio.to_thread(parse_json, await request.body(), "the JSON body")
        except ValueError as error:
            raise _bad_request(error) from None
        if not isinstance(body, dict) or "vector" not in body:
            raise HTTPException(400, 'the JSON body must be {"vector": [numbers]}.')
        return None, body["vector"], {}
    raise HTTPException(415, "send multipart/form-data with a file field 'image', or JSON "
                        '{"vector": [...]}.')


def _query(service, image, vector, params):
    """The `Query` of a request's parameters, each checked in full (a ValueError names
    the bad one): nothing unchecked joins a batch."""
    k = parse_k(params["k"])
    if image is None:  # a JSON body: its vector, whatever it holds (null too)
        vector = parse_vector(vector, service.catalogue.record["provenance"].get("dim"))
    filter_dict = expression = None
    if params["filter"]:
        try:
            filter_dict = parse_filter(params["filter"])
            expression = service.catalogue.expression(filter_dict)
        except (ValueError, RecursionError) as error:
            raise ValueError(f"bad filter: {_one_line(error)}") from None
    rerank = params["rerank"] or None
    if rerank is not None:
        try:
            parse_rerank(rerank)
        except ValueError as error:
            raise ValueError(f"bad rerank: {_one_line(error)}") from None
    return Query(image, vector, k, expression, filter_dict, rerank)


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


def _item_image(catalogue, path):
    """The file of image `path` when it is an item's image of the catalogue (its id or
    its metadata's path) and a file under its root, else None."""
    found = files.image_file(catalogue.root, path)
    return found if found is not None and files.is_item(catalogue, path) else None


def _add_pages(app, service, guard):
    @app.get("/", response_class=HTMLResponse, summary="the search page",
             responses=errors(*EVERY_ROUTE))
    async def page():
        return PAGE

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs():
        return docs_page(app.openapi())

    @app.get("/images/{path:path}", dependencies=guard, summary="a catalogue image",
             response_class=FileResponse, responses={
                 200: {"description": "the image file", "content": {"image/*": {}}},
                 **errors(*EVERY_ROUTE, 401, 404)})
    async def image(path: str):
        if not files.plausible_path(path):  # before the file system is asked anything
            raise HTTPException(404, "no catalogue image at that path.")
        found = await asyncio.to_thread(_item_image, service.catalogue, path)
        if found is None:
            raise HTTPException(404, "no catalogue image at that path.")
        return FileResponse(found)
