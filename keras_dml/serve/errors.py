"""Error answers of `keras-dml serve`: one line for the client, the internals in the log.

Every request gets an id (`X-Request-ID` on each answer, `request_id` in each error
body); the log line of an error carries the same id with what the client is not
told (exception text, Milvus URI). An unexpected exception answers 500 with the id
only, never its text.
"""

import logging
import uuid

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["LOGGER", "RequestIds", "add_handlers", "error_response", "refused",
           "request_id", "unavailable"]

LOGGER = logging.getLogger("keras_dml.serve")
UNAVAILABLE = "the catalogue is unavailable; retry in a few seconds."
RETRY_SECONDS = "5"


def request_id(request):
    """The id `RequestIds` gave `request` (a scope without one gets one now)."""
    return request.scope.setdefault("keras_dml_request_id", uuid.uuid4().hex[:16])


def error_response(request, status, detail, headers=None):
    """The JSON error `{"detail": detail, "request_id": ...}` with `status`."""
    return JSONResponse({"detail": detail, "request_id": request_id(request)}, status,
                        headers=headers)


def unavailable(request, error):
    """A 503 telling the client to retry; `error` (its text may name the Milvus URI)
    goes to the log only, under the request's id."""
    LOGGER.warning("request %s: %s %s: 503: %s: %s", request_id(request), request.method,
                   request.url.path, type(error).__name__, error)
    return HTTPException(503, UNAVAILABLE, headers={"Retry-After": RETRY_SECONDS})


def refused(request, error):
    """A 400 for a search the catalogue refused (`error`'s text, which may name
    Milvus' fields, goes to the log only)."""
    LOGGER.info("request %s: %s %s: 400: %s", request_id(request), request.method,
                request.url.path, error)
    return HTTPException(400, "the catalogue refused this search (its filter, or k past "
                         "the items there are); the log has why, under the request id.")


class RequestIds:
    """ASGI middleware: gives each HTTP request an id, returns it as `X-Request-ID`,
    and answers an exception nothing else handled with a 500 carrying only that id
    (the traceback goes to the log)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        identity = scope.setdefault("keras_dml_request_id", uuid.uuid4().hex[:16])
        started = False

        async def send_with_id(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", identity.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            LOGGER.exception("request %s: %s %s: 500", identity, scope.get("method"),
                             scope.get("path"))
            if started:  # too late for another answer: the connection is cut
                raise
            response = JSONResponse({"detail": "internal error; the log has its details "
                                     "under the request id.", "request_id": identity}, 500)
            await response(scope, receive, send_with_id)


def add_handlers(app):
    """JSON bodies with the request id for `HTTPException`s and FastAPI's 422s."""
    @app.exception_handler(StarletteHTTPException)  # FastAPI's and routing's 404/405
    async def refused(request, error):
        LOGGER.log(logging.WARNING if error.status_code >= 500 else logging.INFO,
                   "request %s: %s %s: %s: %s", request_id(request), request.method,
                   request.url.path, error.status_code, error.detail)
        return error_response(request, error.status_code, error.detail, error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error):
        problems = [f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                    for e in error.errors()]
        return error_response(request, 422, "; ".join(problems))
