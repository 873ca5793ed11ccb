"""structlog configuration: JSON in the container, key=value at a terminal.

Every line of a wake-up carries the resource's namespace, name, generation and phase
(controller/reconcile.py binds them). No log line carries a prompt, an answer, a request
body, a signature, a credential or an environment value, at any level:

- our own code passes identifiers and numbers only, and the keys below are redacted
  (recursively) should one slip through;
- libraries that print request and response bodies, headers or whole objects at DEBUG
  never log below a floor, whatever --log-level says: botocore (request params with
  prompts and model.environment, the signed Authorization header, response bodies with
  answers), urllib3, s3transfer, aiohttp, and kopf (object bodies, diffs and patches of
  specs with their environment values);
- a last filter scrubs SigV4 signatures and Authorization values from any line.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

# Exact keys (lower-cased) whose values are never printed.
_REDACTED_KEYS = frozenset(
    {
        "authorization",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "body",
        "environment",
        "headers",
        "inputs",
        "messages",
        "prompt",
        "prompts",
        "answer",
        "answers",
        "reference",
        "references",
        "params",
        "payload",
    }
)
# Key fragments that mark a credential whatever the key is called (HF_TOKEN, a password).
_SECRET_FRAGMENTS = ("token", "secret", "password", "credential", "api_key", "apikey")
REDACTED = "[redacted]"

# The lowest level each library may log at (its DEBUG lines print what must not be logged).
LIBRARY_FLOORS: dict[str, int] = {
    "botocore": logging.WARNING,
    "boto3": logging.WARNING,
    "s3transfer": logging.WARNING,
    "urllib3": logging.WARNING,
    "aiohttp": logging.WARNING,
    # Reads the Hugging Face token Secret: at DEBUG it prints response bodies.
    "kubernetes": logging.WARNING,
    "kopf": logging.INFO,
}

_SCRUB = (
    (re.compile(r"(Signature=)[0-9a-fA-F]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*b?['\"]?)[^'\",}\n]+"), r"\1" + REDACTED),
    (re.compile(r"(X-Amz-Security-Token=)[^&\s'\"]+"), r"\1" + REDACTED),
)


def scrub(text: str) -> str:
    """The text without SigV4 signatures, Authorization values or session tokens."""
    for pattern, replacement in _SCRUB:
        text = pattern.sub(replacement, text)
    return text


def _secret(key: str) -> bool:
    lowered = key.lower()
    return lowered in _REDACTED_KEYS or any(f in lowered for f in _SECRET_FRAGMENTS)


def redacted(value: Any) -> Any:
    """`value` with every secret-looking key's value replaced, in nested maps and lists."""
    if isinstance(value, Mapping):
        return {k: REDACTED if _secret(str(k)) else redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        event_dict[key] = REDACTED if _secret(key) else redacted(event_dict[key])
    return event_dict


class _Scrubbed(logging.Filter):
    """The stdlib records that reach the handler (kopf's, asyncio's) pass `scrub`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


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
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s", force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Scrubbed())
    for name, floor in LIBRARY_FLOORS.items():
        logging.getLogger(name).setLevel(max(numeric, floor))


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
