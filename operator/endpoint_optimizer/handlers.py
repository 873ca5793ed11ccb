"""kopf wiring only (placeholder while the pipeline lands)."""

from __future__ import annotations

from typing import Any

import kopf

from endpoint_optimizer import GROUP, PLURAL, VERSION
from endpoint_optimizer.runner import current_options


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)


@kopf.timer(GROUP, VERSION, PLURAL, interval=current_options().poll_interval)
def reconcile(patch: kopf.Patch, **_: Any) -> None:
    patch.status["phase"] = "Pending"
