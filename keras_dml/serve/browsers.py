"""What keeps `keras-dml serve` safe beside a web browser.

- Host allow-list: a request whose `Host` is not one the service answers to is
  refused (400), so a web page cannot read the service through DNS rebinding.
- Cross-site requests: a POST a browser sends from another site (`Sec-Fetch-Site`
  cross-site or same-site, or an `Origin` other than the service's) is refused
  (403): a page elsewhere can send a form or a `text/plain` POST without a
  preflight, and must not reach `/admin/reload` or `/search` that way.
- Headers: `X-Content-Type-Options: nosniff` on every answer, a
  Content-Security-Policy (the page's own inline script and style only, by hash;
  `default-src 'none'` for the rest), no framing, no referrer.
"""

import base64
import hashlib
import re

from starlette.requests import Request

from keras_dml.serve.errors import error_response

__all__ = ["LOCAL_HOSTS", "BrowserGuard", "allowed_hosts", "page_policy"]

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
NOT_FROM_HERE = ("cross-site", "same-site")  # Sec-Fetch-Site values from another origin
DEFAULT_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
NONE = "'none'"


def allowed_hosts(bound, extra=()):
    """The host names a service bound to `bound` answers to: `bound` (unless it is a
    wildcard address), the localhost names, and `extra` (`--allowed-hosts`), lower
    case."""
    hosts = [] if bound in ("0.0.0.0", "::", "") else [bound]
    return tuple(dict.fromkeys(h.strip().lower().strip("[]") for h in
                               [*hosts, *LOCAL_HOSTS, *extra] if h.strip()))


def _digest(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page_policy(page):
    """The Content-Security-Policy of an HTML `page`: its inline `<script>` and `<style>`
    blocks allowed by their hashes, requests to this origin only, images from here and
    from `blob:` / `data:` URLs (the page shows fetched images as blobs)."""
    scripts = [_digest(s) for s in re.findall(r"<script>(.*?)</script>", page, re.S)]
    styles = [_digest(s) for s in re.findall(r"<style>(.*?)</style>", page, re.S)]
    return (f"default-src 'none'; script-src {' '.join(scripts) or NONE}; "
            f"style-src {' '.join(styles) or NONE}; "
            "img-src 'self' blob: data:; connect-src 'self'; form-action 'none'; "
            "frame-ancestors 'none'; base-uri 'none'")


def _host_name(host):
    """The name of a `Host` header without its port, lower case (`[::1]:80` -> `::1`)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class BrowserGuard:
    """ASGI middleware: the Host allow-list (`app.state.allowed_hosts`, None: any
    host), the refusal of cross-site POSTs, and the security headers (`policies`:
    path -> Content-Security-Policy, else `DEFAULT_POLICY`)."""

    def __init__(self, app, policies=None):
        self.app, self.policies = app, dict(policies or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        refusal = self._refusal(request, scope["app"].state)
        policy = self.policies.get(scope["path"], DEFAULT_POLICY)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (b"x-content-type-options", b"nosniff"),
                                      (b"content-security-policy", policy.encode()),
                                      (b"x-frame-options", b"DENY"),
                                      (b"referrer-policy", b"no-referrer")]
            await send(message)

        if refusal is not None:
            return await refusal(scope, receive, send_with_headers)
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request, state):
        hosts = getattr(state, "allowed_hosts", None)
        host = request.headers.get("host", "")
        if hosts is not None and _host_name(host) not in hosts:
            return error_response(request, 400, f"the Host {host[:100]!r} is not one this "
                                  "service answers to (start it with --allowed-hosts NAME "
                                  "to add it).")
        if request.method not in UNSAFE_METHODS:
            return None
        if request.headers.get("sec-fetch-site", "") in NOT_FROM_HERE:
            return error_response(request, 403, "a cross-site request from a browser: "
                                  "send it from this service's page or from a client.")
        origin = request.headers.get("origin")
        if origin is not None and origin.partition("://")[2].lower() != host.strip().lower():
            return error_response(request, 403, f"a request from the origin {origin[:100]!r}, "
                                  "another site than this service: refused.")
        return None
