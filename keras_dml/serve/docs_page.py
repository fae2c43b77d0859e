"""`GET /docs`: the API's reference as one self-contained HTML page, built from the
OpenAPI schema (FastAPI's Swagger UI loads its scripts from a CDN, which a machine
offline cannot reach, and which the page's Content-Security-Policy would refuse)."""

import html

__all__ = ["docs_page"]


def _row(cells, tag="td"):
    return "<tr>" + "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells) + "</tr>"


def docs_page(schema):
    """The HTML reference of OpenAPI `schema`: each route, its parameters, its body's
    media types and its answers; the schema itself is linked (`/openapi.json`)."""
    info = schema.get("info", {})
    parts = [f"<h1>{html.escape(info.get('title', 'API'))}</h1>",
             f"<p>{html.escape(info.get('description', ''))}</p>",
             '<p>The schema: <a href="/openapi.json">/openapi.json</a>.</p>']
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            parts.append(f"<h2><code>{method.upper()} {html.escape(path)}</code></h2>"
                         f"<p>{html.escape(operation.get('summary', ''))}</p>")
            parameters = operation.get("parameters", [])
            if parameters:
                parts.append("<table>" + _row(["parameter", "in", "description"], "th")
                             + "".join(_row([p["name"], p["in"], p.get("description", "")])
                                       for p in parameters) + "</table>")
            body = operation.get("requestBody", {}).get("content", {})
            if body:
                parts.append(f"<p>body: {html.escape(', '.join(body))}</p>")
            answers = operation.get("responses", {})
            parts.append("<table>" + _row(["status", "meaning"], "th") + "".join(
                _row([code, answer.get("description", "")]) for code, answer in answers.items())
                + "</table>")
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>API reference</title><style>body { font-family: system-ui, sans-serif; "
            "margin: 2rem; } td, th { padding: .2rem .6rem; text-align: left; }</style>"
            "</head><body>" + "".join(parts) + "</body></html>")
