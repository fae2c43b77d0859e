"""What `/openapi.json` declares beyond FastAPI's defaults: the search's parameters
and body as the service checks them (the vector's dimension among them), and every
error status a route answers, with its JSON body."""

from keras_dml.serve.queries import MAX_FILTER_CHARS, MAX_K

__all__ = ["SEARCH_PARAMETERS", "errors", "search_openapi"]

ERROR = {"type": "object", "required": ["detail", "request_id"], "properties": {
    "detail": {"type": "string", "description": "what was refused, in one line"},
    "request_id": {"type": "string", "description": "the id the service's log line of "
                   "this request carries (also the X-Request-ID header)"}}}
MEANINGS = {
    400: "a bad parameter, body or Host header (the detail names it)",
    401: "the token is missing or wrong",
    403: "a cross-site request from a browser",
    404: "no such image among the catalogue's items",
    409: "the model loaded does not match the catalogue",
    411: "no Content-Length header",
    413: "the body, the image or its pixels (over all frames) past the limits",
    415: "neither multipart/form-data nor application/json, or an animated WebP",
    500: "an unexpected error (the log has it under the request id)",
    503: "the catalogue is unreachable or not ready: retry after Retry-After seconds",
}

SEARCH_PARAMETERS = [
    {"name": "k", "in": "query", "required": False, "description": f"results, 1 to {MAX_K}",
     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10}},
    {"name": "filter", "in": "query", "required": False, "description": "as keras-dml "
     "search --filter, e.g. 'label == \"boots\" and price < 20', or a JSON filter of "
     "keras_dml.index.filters", "schema": {"type": "string", "maxLength": MAX_FILTER_CHARS}},
    {"name": "rerank", "in": "query", "required": False, "description": "qe, dba or "
     "k_reciprocal, with options as qe:n=2,alpha=3 (each at most 100; depth 200)",
     "schema": {"type": "string", "maxLength": 200}},
    {"name": "threshold", "in": "query", "required": False, "description": "similarity at "
     "which a result matches", "schema": {"type": "number"}},
]


def errors(*statuses):
    """The OpenAPI `responses` of these error statuses, each with the error body."""
    return {status: {"description": MEANINGS[status], "content": {
        "application/json": {"schema": ERROR}}} for status in statuses}


def search_openapi(dim):
    """`openapi_extra` of `POST /search`: its parameters and its two bodies, the vector
    of `dim` numbers (any length when `dim` is None)."""
    vector = {"type": "array", "items": {"type": "number"},
              "description": "an embedding of the catalogue's dimension"}
    if dim is not None:
        vector.update(minItems=dim, maxItems=dim)
    return {"parameters": SEARCH_PARAMETERS, "requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": ["image"],
                                           "properties": {"image": {
                                               "type": "string", "format": "binary",
                                               "description": "the photo (JPEG, PNG, GIF, "
                                               "BMP or still WebP)"}}}},
        "application/json": {"schema": {"type": "object", "required": ["vector"],
                                        "properties": {"vector": vector}}}}}}
