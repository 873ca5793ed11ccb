"""structlog configuration: JSON in the container, key=value at a terminal.

Every line carries the resource's namespace, name, generation and phase when it
is bound (see `bind_resource`). Nothing here ever logs request bodies, prompts or
credentials: callers pass identifiers and numbers only.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_REDACTED_KEYS = frozenset(
    {"aws_secret_access_key", "aws_session_token", "authorization", "prompt", "body", "inputs"}
)


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        if key.lower() in _REDACTED_KEYS:
            event_dict[key] = "[redacted]"
    return event_dict


def configure(level: str = "INFO", json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger once, at process start."""
    if json is None:
        json = not sys.stderr.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r} is not one of DEBUG, INFO, WARNING, ERROR")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    # At DEBUG these print request bodies and headers: the HF_TOKEN of a CreateModel, SigV4
    # signatures, a Secret read by the kubernetes client. They stay at INFO or above.
    for noisy in ("botocore", "boto3", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.INFO))


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
