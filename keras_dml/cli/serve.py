"""`keras-dml serve`: the visual-search service over a catalogue on Milvus."""

import logging
import os
import sys

__all__ = ["TOKEN_ENV", "MILVUS_TOKEN_ENV", "add_command", "run"]

TOKEN_ENV = "KERAS_DML_SERVE_TOKEN"  # the service's token, when set
MILVUS_TOKEN_ENV = "KERAS_DML_MILVUS_TOKEN"  # the Milvus server's token, when set


def add_command(commands):
    """Adds `serve` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "serve", help="serve visual search over a catalogue (web page and JSON API)",
        description="Serve POST /search (a photo in, the most similar catalogue items out), "
        "a search page at /, catalogue images, health checks and the OpenAPI page /docs. "
        "The model must be the one that built the catalogue (its fingerprint is checked). "
        f"Tokens come from the environment, never the command line: {TOKEN_ENV} (asked of "
        f"clients as 'Authorization: Bearer TOKEN') and {MILVUS_TOKEN_ENV} (the Milvus "
        "server's).")
    parser.add_argument("model", metavar="RUN|SAVEDMODEL|BACKBONE",
                        help="the run that built the catalogue, its .keras file, or its "
                        "SavedModel export (keras-dml export); or the pretrained backbone "
                        "(hub:PRESET or a Keras Applications name) of a catalogue "
                        "indexed with keras-dml index --backbone")
    parser.add_argument("--uri", required=True,
                        help="Milvus URI of the catalogue (a Lite .db folder or http(s)://)")
    parser.add_argument("--collection", default=None, metavar="NAME|ALIAS",
                        help="collection or alias (default: keras_dml's); a moved alias is "
                        "followed without a restart")
    parser.add_argument("--token-file", default=None,
                        help=f"read the service's token from this file instead of {TOKEN_ENV}")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--allowed-hosts", default="", metavar="NAME,...",
                        help="host names the service answers to besides the --host address "
                        "and localhost, 127.0.0.1, ::1 (the Host header, without its port; "
                        "comma-separated), e.g. shop.example.com behind a proxy; any other "
                        "Host gets a 400, which keeps web pages out (DNS rebinding)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--max-batch", type=int, default=32,
                        help="requests embedded in one forward pass at most (default 32)")
    parser.add_argument("--max-upload-mb", type=float, default=10.0,
                        help="largest image file accepted, in MB (default 10)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="similarity at which a result matches (default: the run's "
                        "calibrated threshold where it has one)")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="serve even when the model is not the one that built the "
                        "catalogue (its scores are then meaningless)")
    parser.add_argument("--milvus-timeout", type=float, default=3.0, metavar="SECONDS",
                        help="seconds any one call to Milvus may take (default 3): while "
                        "Milvus is down or hangs, requests get 503 with Retry-After within "
                        "about this, and the service heals by itself once Milvus is back")
    parser.set_defaults(handler=run, light_imports=True)


def _token(args):
    if args.token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    with open(args.token_file) as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"--token-file {args.token_file} is empty.")
    return token


def _log_to_stderr():
    """The service's log lines (each refusal and failure with its request id, and what
    the client is not told) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s keras-dml serve: %(message)s"))
    logger = logging.getLogger("keras_dml.serve")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _host_names(text):
    """The names of `--allowed-hosts` (comma-separated), each checked."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if not all(c.isalnum() or c in ".-:[]_" for c in name) or len(name) > 253:
            raise ValueError(f"--allowed-hosts: {name[:60]!r} is not a host name.")
    return names


def _import_tensorflow_quietly():
    """TensorFlow decodes the uploads (in a SavedModel's graph, or by the run's
    preprocessing): imported first, without its start-up log lines."""
    import importlib.util

    from keras_dml.cli.parser import _quiet_stderr

    if importlib.util.find_spec("tensorflow") is not None:
        with _quiet_stderr():
            import tensorflow as tf

            tf.config.list_physical_devices()  # device start-up logs (cuInit) while quiet
        tf.get_logger().setLevel("ERROR")


def run(args):
    """Loads the model, checks it against the catalogue and serves until interrupted."""
    import uvicorn

    from keras_dml.serve.app import create_app
    from keras_dml.serve.browsers import allowed_hosts
    from keras_dml.serve.uploads import ImageLimits

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be between 1 and 65535, got {args.port}.")
    if args.max_batch < 1:
        raise ValueError(f"--max-batch must be at least 1, got {args.max_batch}.")
    if args.max_upload_mb <= 0:
        raise ValueError(f"--max-upload-mb must be positive, got {args.max_upload_mb}.")
    if not 0 < args.milvus_timeout <= 3600:
        raise ValueError(f"--milvus-timeout must be more than 0 and at most 3600 seconds, got "
                         f"{args.milvus_timeout}.")
    hosts = allowed_hosts(args.host, _host_names(args.allowed_hosts))
    token = _token(args)
    _import_tensorflow_quietly()
    app = create_app(args.model, args.uri, args.collection, token=token,
                     milvus_token=os.environ.get(MILVUS_TOKEN_ENV) or None,
                     max_batch=args.max_batch, threshold=args.threshold,
                     limits=ImageLimits(max_bytes=int(args.max_upload_mb * 1024 * 1024)),
                     allow_mismatch=args.allow_mismatch, allowed_hosts=hosts,
                     milvus_timeout=args.milvus_timeout)
    service = app.state.service
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"keras-dml serve: warning: listening on {args.host} without a token: anyone who "
              f"reaches it can search and read the catalogue's images (set {TOKEN_ENV}).",
              file=sys.stderr)
    print(f"serve: {service.embedder.source} on collection {service.catalogue.collection} at "
          f"{args.uri}: http://{args.host}:{args.port}/ (token {'on' if token else 'off'})",
          flush=True)
    _log_to_stderr()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
