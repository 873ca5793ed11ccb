"""kopf wiring only: what wakes the operator up, and which function of controller/ it runs.

Wake-ups: one timer per resource, the level-triggered heartbeat, every
--poll-interval; and a watch event whose lever annotations (approve, rollback,
pause, refresh) differ from those status.observedLevers says were last acted on,
so a lever acts at once instead of at the next beat. Both run the same wake-up
(reconcile.py) under the same per-object lock, which also keeps the finalizer off
a resource being reconciled. Status is written only through the status
subresource, as a merge patch. Handler ids are fixed: kopf keys its progress
annotations by them, and the index ids are the keyword names handlers receive.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from endpoint_optimizer import GROUP, PLURAL, VERSION
from endpoint_optimizer.controller import reconcile
from endpoint_optimizer.controller.configmaps import KopfConfigMaps
from endpoint_optimizer.controller.finalize import finalize
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.controller.progress import KopfStatusWriter
from endpoint_optimizer.controller.reconcile import Dependencies

RESOURCE = (GROUP, VERSION, PLURAL)


def register(registry: kopf.OperatorRegistry, options: OperatorOptions) -> None:
    """Register the operator's handlers on `registry`, for `kopf.operator(registry=...)`."""

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure_kopf(settings, options)
        memo.deps = Dependencies.start(
            options, KopfConfigMaps(settings), KopfStatusWriter(settings)
        )

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # kopf's default registry adds these fallbacks itself; one of our own has none. The
        # same two, in kopf's order (neither pykube nor the kubernetes client is installed).
        return kopf.login_with_kubeconfig(**kwargs) or kopf.login_with_service_account(**kwargs)

    @kopf.on.cleanup(id="close", registry=registry)
    def close(memo: kopf.Memo, **_: Any) -> None:
        deps: Dependencies | None = getattr(memo, "deps", None)
        if deps is not None:
            deps.aws.close()

    @kopf.index(*RESOURCE, id="endpoint_claims", registry=registry)
    def endpoint_claims(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        """Which OptimizedEndpoints name each (region, endpointName): decide() refuses a second."""
        return reconcile.claim(body)

    every = options.poll_interval

    @kopf.timer(*RESOURCE, id="heartbeat", interval=every, initial_delay=0, registry=registry)
    async def heartbeat(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
        async with _lock(memo):
            # Stopped while it waited for the lock (the object is being deleted, or the
            # operator exits): the finalizer holds the lock now or has done its work.
            stopped: kopf.DaemonStopped = kwargs["stopped"]
            if not stopped:
                await _wake(memo, body, patch, kwargs)

    @kopf.on.event(*RESOURCE, id="lever_changed", registry=registry)
    async def lever_changed(
        event: kopf.RawEvent, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        """A lever annotation set, changed or removed: the same wake-up, now, not at the beat."""
        woken_by = getattr(memo, "levers_woken", None)
        if reconcile.levers_moved(memo.deps, event.get("type"), body, woken_by) is None:
            return
        async with _lock(memo):
            # The heartbeat may have acted on them while this waited for the lock.
            levers = reconcile.levers_moved(memo.deps, event.get("type"), body, woken_by)
            if levers is not None:
                memo.levers_woken = levers
                await _wake(memo, body, patch, kwargs)

    @kopf.on.delete(*RESOURCE, id="finalize", registry=registry)
    async def finalizer(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        async with _lock(memo):
            waiting = await finalize(memo.deps, body)
        if waiting is not None:
            raise kopf.TemporaryError(waiting, delay=every)


def configure_kopf(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
    """kopf's settings for this operator (its startup activity applies them)."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Watches can go silent without an error (kopf #204, #698): the server closes each
    # watch after ~4.5 min and the client gives up after 5, so a dead one is replaced.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.posting.level = 20  # INFO: transitions and failed checks become Events
    # A deleted object keeps kopf's finalizer until its heartbeat timer has exited. kopf
    # waits ten zero-time loop cycles for that, then checks again only after
    # cancellation_polling: 60 s by default. A heartbeat that is still sending its status
    # patch, or waiting for the lock the finalizer holds, misses those cycles on a busy
    # event loop, and the deletion then hung a minute (seen in CI). Wait a tenth of a
    # second by the clock instead, and check again within one poll.
    settings.background.instant_exit_timeout = 0.1
    settings.background.cancellation_polling = min(options.poll_interval, 5.0)


def _lock(memo: kopf.Memo) -> asyncio.Lock:
    """The object's lock (kopf's memo is per object, shallow-copied from the operator's)."""
    lock: asyncio.Lock | None = getattr(memo, "reconcile_lock", None)
    if lock is None:
        lock = asyncio.Lock()
        memo.reconcile_lock = lock
    return lock


async def _wake(
    memo: kopf.Memo, body: kopf.Body, patch: kopf.Patch, kwargs: dict[str, Any]
) -> None:
    # kopf passes each index as a keyword named after its id.
    deps: Dependencies = memo.deps
    woken = await reconcile.wake(deps, body, kwargs["endpoint_claims"])
    for event in woken.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])
    patch.status.update(woken.status_patch)
