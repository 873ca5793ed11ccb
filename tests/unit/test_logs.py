"""logs.py: secret-looking keys redacted at any depth, signatures scrubbed, libraries floored."""

from __future__ import annotations

import logging

import structlog

from endpoint_optimizer import logs


def test_secret_keys_are_redacted_at_any_depth_and_signatures_scrubbed() -> None:
    event = {
        "event": "x",
        "request": {"Environment": {"HF_TOKEN": "hf_1"}, "Body": "prompt text"},
        "headers": {"Authorization": "AWS4-HMAC-SHA256 Credential=a, Signature=ab12"},
        "note": "url?X-Amz-Security-Token=abc&Signature=0123abcd",
        "items": [{"prompt": "p", "id": 3}],
        "my_api_key": "k",
    }
    out = logs._redact(None, "info", dict(event))
    assert out["request"] == {"Environment": logs.REDACTED, "Body": logs.REDACTED}
    assert out["headers"] == logs.REDACTED
    assert "abc" not in out["note"] and "0123abcd" not in out["note"]
    assert out["items"] == [{"prompt": logs.REDACTED, "id": 3}]
    assert out["my_api_key"] == logs.REDACTED


def test_libraries_that_print_bodies_never_log_below_their_floor() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logs.configure("DEBUG", json=True)
    try:
        assert logging.getLogger().level == logging.DEBUG
        for name, floor in logs.LIBRARY_FLOORS.items():
            assert logging.getLogger(name).getEffectiveLevel() >= floor, name
        assert not logging.getLogger("botocore.endpoint").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("kopf.objects").isEnabledFor(logging.DEBUG)
    finally:
        # Leave the process as the other tests found it.
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)
        for name in logs.LIBRARY_FLOORS:
            logging.getLogger(name).setLevel(logging.NOTSET)
