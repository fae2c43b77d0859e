"""Bounds on what a request may make the service read: its body's bytes, its media
type, the nesting of its JSON.

`BodyLimit` counts the bytes actually received, whatever `Content-Length` or
`Transfer-Encoding` claim, and stops reading at the limit with a 413.
"""

import json

from fastapi import HTTPException

__all__ = ["MAX_JSON_DEPTH", "BodyLimit", "BodyTooLarge", "json_depth", "media_type",
           "parse_json"]

MAX_JSON_DEPTH = 16  # nesting of a JSON body or filter at most


class BodyTooLarge(HTTPException):
    """A body past the limit (413), raised from the body's reading."""

    def __init__(self, limit):
        super().__init__(413, f"the request body has more than {limit} bytes, the limit.")


class BodyLimit:
    """ASGI middleware: reading a request body past `max_bytes` raises `BodyTooLarge`
    (answered 413) at the first message past the limit; no later message is read."""

    def __init__(self, app, max_bytes):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)


def media_type(header):
    """The media type of a `Content-Type` header, lower case, without parameters
    (`Multipart/Form-Data; boundary=x` -> `multipart/form-data`)."""
    return header.partition(";")[0].strip().lower()


def json_depth(value):
    """How deep `value` (parsed JSON) nests lists and objects (a scalar: 0)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else (
            value if isinstance(value, list) else None)
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # deeper is refused anyway: stop counting there
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text, what):
    """`text` (str or UTF-8 bytes) parsed, nesting at most `MAX_JSON_DEPTH`.

    Raises:
        ValueError: Not JSON, or nested deeper (the message names `what`).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is nested too deep (at most {MAX_JSON_DEPTH} levels)."
                         ) from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what} is not valid JSON (UTF-8).") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"{what} is nested too deep (at most {MAX_JSON_DEPTH} levels).")
    return value
