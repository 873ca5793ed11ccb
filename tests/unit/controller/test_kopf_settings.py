"""kopf's settings that the operator's behaviour rests on."""

from __future__ import annotations

import kopf
import pytest

from endpoint_optimizer.controller.handlers import configure_kopf
from endpoint_optimizer.controller.options import OperatorOptions


@pytest.mark.parametrize("poll", [0.25, 2.0, 30.0, 300.0])
def test_a_deleted_object_waits_for_its_heartbeat_at_most_one_poll(poll: float) -> None:
    # kopf keeps the finalizer until the heartbeat timer has exited, and re-checks a timer
    # that did not exit at once only after cancellation_polling (60 s by default): a
    # deletion in CI hung that long behind a heartbeat still sending its status patch.
    settings = kopf.OperatorSettings()
    assert settings.background.cancellation_polling == 60  # kopf's default, the hang
    configure_kopf(settings, OperatorOptions(poll_interval=poll))
    assert settings.background.cancellation_polling <= min(poll, 5.0)
    # "At once" is measured by the clock, not by ten event-loop cycles a busy loop skips.
    assert settings.background.instant_exit_timeout is not None
    assert 0 < settings.background.instant_exit_timeout <= 0.1


def test_the_finalizer_and_progress_are_the_operators_own() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, OperatorOptions())
    assert settings.persistence.finalizer == "optimizer.dev/finalizer"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    # Dead watches are replaced: the client gives up after the server would have closed.
    assert settings.watching.server_timeout < settings.watching.client_timeout
