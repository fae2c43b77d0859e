"""`keras-dml serve`: a visual-search web service over a keras_dml catalogue on Milvus.

`create_app(model, uri, ...)` returns the FastAPI application (run it with
uvicorn); the `serve` extra installs FastAPI, uvicorn and python-multipart.
"""

__all__ = ["create_app"]


def __getattr__(name):
    if name == "create_app":
        from keras_dml.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'keras_dml.serve' has no attribute {name!r}")
