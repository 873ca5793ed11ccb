"""A new spec generation: stop what the last one started, keep what it made, start again."""

from __future__ import annotations

from collections.abc import Callable

from endpoint_optimizer.api import Phase, RolloutStatus, SageMakerResources
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import IN_PROGRESS_JOB, ActionKind
from endpoint_optimizer.pipeline.phases import retain
from endpoint_optimizer.pipeline.reasons import Reason
from endpoint_optimizer.pipeline.wakeup import Outcome, Planned, Wakeup


def start_generation(w: Planned) -> Outcome:
    """A new spec generation: forget the last one's measurements, keep what was made."""
    levers = w.status.rollout.levers_handled
    previous = w.status.sagemaker
    # The last generation's jobs build a candidate nobody will deploy.
    stop_jobs(w)
    if previous.baseline_retained_until is not None and previous.baseline_deleted_at is None:
        # The new generation measures what serves now as its baseline: the retained
        # one is no rollback target any more.
        retain.release_baseline(w, f"spec generation {w.res.generation} replaces the baseline")
    status = w.status
    status.observed_generation = w.res.generation
    w.names = plan.Names.of(w.res.owner, w.res.generation)
    status.baseline = None
    status.candidate = None
    status.checks = []
    status.objective_gain = None
    status.last_error = ""
    status.candidate_techniques = []
    status.search = None
    status.spot_check = None
    status.eval_noise = None
    status.rollout = RolloutStatus(levers_handled=levers)
    # Keep what was made before (cleanup needs it); forget per-generation pointers.
    status.sagemaker = SageMakerResources(
        region=previous.region,
        endpoint_name=previous.endpoint_name,
        models=previous.models,
        endpoint_configs=previous.endpoint_configs,
        optimization_jobs=previous.optimization_jobs,
        training_jobs=previous.training_jobs,
        alarms=previous.alarms,
        adopted=previous.adopted,
        serving_endpoint_config=previous.serving_endpoint_config,
        # spec.inferenceComponent: the adopted component stays the baseline (baselining
        # re-reads the Model it serves now), and the components made stay listed.
        baseline_component=previous.baseline_component,
        baseline_component_model=previous.baseline_component_model,
        inference_components=previous.inference_components,
    )
    return w.goto(
        Phase.PENDING, Reason.GENERATION_STARTED, f"pipeline for generation {w.res.generation}"
    )


def stop_jobs(w: Wakeup, stop: Callable[[str], bool] | None = None) -> None:
    """Stop the optimization and training jobs of ours that `stop` names; by default
    those observed still running."""
    sm = w.status.sagemaker
    running = IN_PROGRESS_JOB - {"STOPPING"}

    def observed_running(job: str) -> bool:
        observed = w.obs.jobs.get(job)
        return observed is not None and observed.status in running

    wanted = stop or observed_running
    for job in sm.optimization_jobs:
        if wanted(job):
            w.act(ActionKind.STOP_OPTIMIZATION_JOB, job, {"OptimizationJobName": job})
    for job in sm.training_jobs:
        if wanted(job):
            w.act(ActionKind.STOP_TRAINING_JOB, job, {"TrainingJobName": job})
