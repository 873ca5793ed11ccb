"""A benchmark level beyond one pod: a Kubernetes Indexed Job of shard pods (bench.shards).

`JobLauncher` is the `ShardLauncher` the operator hands to the benchmark when a level
needs more streams than its own process may hold (`BenchLimits.shards`). For one level
of one measurement it:

1. names the run deterministically from the OptimizedEndpoint's uid and the plan (the
   targets, the settings, the prompts, the level, the split), so an operator that
   restarts mid-level finds its Job and waits for it rather than starting a second;
2. writes the plan ConfigMap (same name): targets, settings, prompts, the split, and the
   start barrier `start_at` = now + `start_margin_s` (time for the pods to be scheduled,
   pull the image and import);
3. creates the Indexed Job (batch/v1, completionMode Indexed, completions = parallelism
   = N, backoffLimitPerIndex 0: a retried pod would miss the barrier), of the operator's
   image and a ServiceAccount (the operator's: its pods get the operator's AWS identity
   through IRSA or EKS Pod Identity), owned by the OptimizedEndpoint; each pod runs
   `endpoint-optimizer bench --shard $(JOB_COMPLETION_INDEX)/N --plan-configmap NS/NAME`
   and writes its result as ConfigMaps NAME-s<i>-p<k> (bench.transport);
4. polls (one LIST of the run's result ConfigMaps and one GET of the Job per
   `poll_s`) until every shard has a result, or is listed in the Job's failedIndexes,
   or the level's deadline passes; then
5. deletes the Job (its pods with it), the plan and the results, and returns what it
   read; `bench.shards.merge_shards` validates and merges it (a missing shard, named,
   makes the level Inconclusive).

Kubernetes calls go through the `kubernetes` client on worker threads, in-cluster or from
KUBECONFIG (as controller/secrets.py). RBAC: jobs create/get/delete; configmaps
create/list/delete beside the get the operator already had, and patch for the pods'
progress counts, which the same poll reads and sums (chart: templates/_helpers.tpl).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from endpoint_optimizer import GROUP, KIND, VERSION
from endpoint_optimizer.bench.models import BenchConfig, BenchTarget
from endpoint_optimizer.bench.shards import (
    ShardLauncher,
    ShardOutcome,
    ShardPlan,
    ShardProgress,
)
from endpoint_optimizer.bench.transport import (
    LABEL_RUN,
    PLAN_KEY,
    is_progress,
    plan_of,
    progress_from_configmaps,
    results_from_configmaps,
)
from endpoint_optimizer.controller.options import OperatorOptions
from endpoint_optimizer.sagemaker.naming import Owner

log = structlog.get_logger(__name__)

LABEL_OWNER = f"{GROUP}/owner"
# AWS settings (never credentials) the pods inherit from the operator: where to send and
# sign. Credentials come from the ServiceAccount's identity, not from the Job's spec.
_INHERITED_ENV = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
    "AWS_STS_REGIONAL_ENDPOINTS",
)
_FAILED = re.compile(r"^\d+(-\d+)?$")


def _clients() -> tuple[Any, Any, Any]:
    from kubernetes import client

    from endpoint_optimizer.bench.transport import api_client

    api = api_client()
    return client.CoreV1Api(api), client.BatchV1Api(api), api


def run_name(
    owner: Owner,
    targets: Sequence[BenchTarget],
    config: BenchConfig,
    level_index: int,
    shards: int,
) -> str:
    """The measurement level's Job (and plan ConfigMap) name: a DNS label, <= 63."""
    identity = "\n".join(
        [
            owner.uid,
            *(t.model_dump_json() for t in targets),
            config.model_dump_json(exclude={"run_id"}),
            *(item.model_dump_json() for item in config.dataset or []),
            str(level_index),
            str(shards),
        ]
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]", "-", owner.name.lower())[:40].strip("-") or "eo"
    return f"{stem}-bench-{digest}"


def failed_indexes(text: str | None) -> set[int]:
    """The Job's status.failedIndexes ('1,3-5') as a set."""
    found: set[int] = set()
    for item in (text or "").split(","):
        item = item.strip()
        if not _FAILED.match(item):
            continue
        low, _, high = item.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def level_bound_s(config: BenchConfig, level_index: int) -> float:
    """How long the level may take after the barrier: each slot's requests one after the
    other, each within the read timeout (a bound, not an estimate)."""
    concurrency = config.concurrency[level_index]
    per_slot = math.ceil((config.warmup + config.requests) / concurrency)
    return config.ramp_up_s + config.read_timeout_s * (per_slot + 1)


@dataclass
class JobLauncher:
    """Runs one level's shards as an Indexed Job of the OptimizedEndpoint `owner`."""

    owner: Owner
    image: str
    service_account: str
    poll_s: float = 1.0
    start_margin_s: float = 60.0
    start_tolerance_s: float = 5.0
    # How often each shard pod rewrites its count of finished requests; the level's progress
    # in status moves at this pace (and the poll's) while it runs on pods.
    progress_interval_s: float = 5.0
    resources: dict[str, Any] = field(
        default_factory=lambda: {
            "requests": {"cpu": "1", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        }
    )
    _api: tuple[Any, Any, Any] | None = field(default=None, repr=False)

    def _apis(self) -> tuple[Any, Any, Any]:
        if self._api is None:
            self._api = _clients()
        return self._api

    def owner_references(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": self.owner.name,
                "uid": self.owner.uid,
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ]

    def _labels(self, name: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/managed-by": "endpoint-optimizer",
            "app.kubernetes.io/component": "bench-shard",
            LABEL_OWNER: self.owner.name,
            LABEL_RUN: name,
        }

    def plan_configmap(self, name: str, plan: ShardPlan) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.owner.namespace,
                "labels": {**self._labels(name), "optimizer.dev/bench-plan": "true"},
                "ownerReferences": self.owner_references(),
            },
            "data": {PLAN_KEY: plan.to_json()},
        }

    def job(self, name: str, shards: int, deadline_s: float) -> dict[str, Any]:
        env = [{"name": k, "value": os.environ[k]} for k in _INHERITED_ENV if k in os.environ]
        args = [
            "bench",
            "--shard",
            f"$(JOB_COMPLETION_INDEX)/{shards}",
            "--plan-configmap",
            f"{self.owner.namespace}/{name}",
        ]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": self.owner.namespace,
                "labels": self._labels(name),
                "ownerReferences": self.owner_references(),
            },
            "spec": {
                "completionMode": "Indexed",
                "completions": shards,
                "parallelism": shards,
                # A retried pod would start after the barrier: it would only say so.
                "backoffLimitPerIndex": 0,
                "maxFailedIndexes": shards,
                "activeDeadlineSeconds": math.ceil(deadline_s),
                # A safety net should the operator never come back to delete it.
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "metadata": {"labels": self._labels(name)},
                    "spec": {
                        "serviceAccountName": self.service_account,
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "bench",
                                "image": self.image,
                                "command": ["endpoint-optimizer"],
                                "args": args,
                                "env": env,
                                "resources": self.resources,
                            }
                        ],
                    },
                },
            },
        }

    async def __call__(
        self,
        targets: Sequence[BenchTarget],
        config: BenchConfig,
        level_index: int,
        shards: int,
        progress: ShardProgress | None = None,
    ) -> ShardOutcome:
        name = run_name(self.owner, targets, config, level_index, shards)
        run_config = config.model_copy(update={"run_id": name, "dataset": None})
        plan = await asyncio.to_thread(
            self._start, name, targets, run_config, config, level_index, shards
        )
        deadline = plan.start_at + level_bound_s(run_config, level_index) + self.start_margin_s
        try:
            return await self._wait(name, shards, deadline, progress)
        finally:
            await asyncio.to_thread(self._clean_up, name)

    def _start(
        self,
        name: str,
        targets: Sequence[BenchTarget],
        run_config: BenchConfig,
        config: BenchConfig,
        level_index: int,
        shards: int,
    ) -> ShardPlan:
        """Find the run's plan and Job, or make them (blocking). The plan's barrier."""
        from kubernetes.client.exceptions import ApiException

        core, batch, _ = self._apis()
        namespace = self.owner.namespace
        try:
            found = core.read_namespaced_config_map(name, namespace)
            plan = plan_of((found.data or {})[PLAN_KEY])
            log.info("bench job found", job=name, shards=shards)
        except ApiException as exc:
            if exc.status != 404:
                raise
            plan = ShardPlan(
                targets=list(targets),
                config=run_config,
                dataset=config.dataset,
                level_index=level_index,
                shards=shards,
                start_at=time.time() + self.start_margin_s,
                start_tolerance_s=self.start_tolerance_s,
                progress_interval_s=self.progress_interval_s,
            )
            core.create_namespaced_config_map(namespace, self.plan_configmap(name, plan))
        deadline_s = self.start_margin_s * 2 + level_bound_s(run_config, level_index)
        try:
            batch.create_namespaced_job(namespace, self.job(name, shards, deadline_s))
            log.info("bench job created", job=name, shards=shards, start_at=plan.start_at)
        except ApiException as exc:
            if exc.status != 409:  # 409: this run's Job exists already: wait for it
                raise
        return plan

    def _poll(self, name: str) -> tuple[list[dict[str, Any]], set[int], bool]:
        """(result ConfigMaps, failed indexes, whether the Job has finished) (blocking)."""
        from kubernetes.client.exceptions import ApiException

        core, batch, api = self._apis()
        namespace = self.owner.namespace
        listed = core.list_namespaced_config_map(
            namespace, label_selector=f"{LABEL_RUN}={name},!optimizer.dev/bench-plan"
        )
        configmaps = [api.sanitize_for_serialization(item) for item in listed.items]
        try:
            job = batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return configmaps, set(), True
        status = job.status
        finished = any(
            c.type in ("Complete", "Failed") and c.status == "True"
            for c in (status.conditions if status and status.conditions else [])
        )
        return configmaps, failed_indexes(status.failed_indexes if status else None), finished

    async def _wait(
        self, name: str, shards: int, deadline: float, progress: ShardProgress | None = None
    ) -> ShardOutcome:
        told = 0
        while True:
            configmaps, failed, finished = await asyncio.to_thread(self._poll, name)
            if progress is not None and (done := progress_from_configmaps(configmaps)) > told:
                told = done
                progress(done)
            # A shard whose parts are not all there yet is waited for, like one with none.
            results, unreadable = results_from_configmaps(
                [cm for cm in configmaps if not is_progress(cm)]
            )
            have = {r.shard for r in results}
            missing = {i for i in range(shards) if i not in have}
            over = time.time() > deadline
            if not missing or missing <= failed or finished or over:
                break
            await asyncio.sleep(self.poll_s)
        why = {
            i: unreadable.get(i)
            or (
                "its pod failed (the Job's failedIndexes)"
                if i in failed
                else "the Job finished without it"
                if finished
                else "no result by the level's deadline"
            )
            for i in missing
        }
        return ShardOutcome(run_id=name, results=results, missing=why)

    def _clean_up(self, name: str) -> None:
        """Delete the Job (and its pods), the plan and the results (blocking)."""
        from kubernetes.client.exceptions import ApiException

        core, batch, _ = self._apis()
        namespace = self.owner.namespace
        try:
            batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                log.warning("bench job not deleted", job=name, status=exc.status)
        listed = core.list_namespaced_config_map(namespace, label_selector=f"{LABEL_RUN}={name}")
        for item in listed.items:
            try:
                core.delete_namespaced_config_map(item.metadata.name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("bench configmap not deleted", name=item.metadata.name)


def shard_launcher(options: OperatorOptions, owner: Owner) -> ShardLauncher | None:
    """The Job launcher of one OptimizedEndpoint's measurements; None while the Job path
    is off (`--bench-max-shards 0`, the default)."""
    jobs = options.bench_jobs
    if jobs is None or options.bench.max_shards == 0:
        return None
    return JobLauncher(owner, jobs.image, jobs.service_account, start_margin_s=jobs.start_margin_s)
