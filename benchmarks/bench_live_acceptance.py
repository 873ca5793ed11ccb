"""Live acceptance: the estimate from the container's log lines against the sandbox's truth.

    nice -n 10 .venv/bin/python benchmarks/bench_live_acceptance.py [--out FILE]

A speculating (n-gram, 4 tokens) variant in the sandbox's model mode (jittered, batched)
serves unpinned traffic from a few threads; after `--before` one-second intervals its
drafts start missing (an acceptance regression, per-token acceptance x `--factor`). After
the run, every interval is read as the operator reads it (FilterLogEvents over
[start, end), real boto3, the vLLM lines parsed as counters) and folded by the live judge
with the floor; the truth is the accepted/drafted tokens of the requests that ended in
the interval, from the sandbox's traffic record. Reported: mean absolute error of the
rate, how often the truth lies inside the estimate's bounds, the lag between the
regression and the first confidently-below interval and the rollback (failureLimit 2),
in intervals.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from endpoint_optimizer.analysis.live import (
    LiveObservation,
    LivePolicy,
    VariantInterval,
    judge_interval,
)
from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.api.live import LiveDecision, LiveState
from endpoint_optimizer.aws.logs import ContainerLogReader
from endpoint_optimizer.sandbox.config import AcceptanceRegression, Faults, SandboxConfig
from endpoint_optimizer.sandbox.testing import running_sandbox

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130"
ROLE = "arn:aws:iam::123456789012:role/sagemaker-exec"
ENDPOINT = "spec"


def deploy(sm: Any) -> None:
    sm.create_model(
        ModelName="spec-model",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": IMAGE,
            "ModelDataUrl": "s3://models/llama-3.1-8b/",
            "Environment": {
                "OPTION_SPECULATIVE_DRAFT_MODEL": "[ngram]",
                "OPTION_SPECULATIVE_LENGTH": "4",
            },
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName="spec-config",
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": "spec-model",
                "InstanceType": "ml.g6e.2xlarge",
                "InitialInstanceCount": 2,
                "InitialVariantWeight": 1.0,
            }
        ],
    )
    sm.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName="spec-config")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=ENDPOINT, WaiterConfig={"Delay": 0.02, "MaxAttempts": 500}
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=int, default=12, help="healthy intervals")
    parser.add_argument("--after", type=int, default=12, help="intervals after the regression")
    parser.add_argument("--factor", type=float, default=0.4)
    parser.add_argument("--floor", type=float, default=0.25)
    parser.add_argument("--log-interval", type=float, default=0.25)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = SandboxConfig(
        time_scale=0.0002,
        serving_time_scale=0.05,
        workload_overlap=1.0,
        container_log_interval_s=args.log_interval,
        seed=11,
    )
    with running_sandbox(config) as sandbox:
        deploy(sandbox.client("sagemaker"))
        runtime = sandbox.client("sagemaker-runtime")
        body = json.dumps({"inputs": "repeat after me", "parameters": {"max_new_tokens": 48}})
        stop = threading.Event()

        def send() -> None:
            while not stop.is_set():
                runtime.invoke_endpoint(
                    EndpointName=ENDPOINT, ContentType="application/json", Body=body
                )["Body"].read()

        workers = [threading.Thread(target=send, daemon=True) for _ in range(args.threads)]
        first = math.ceil(time.time()) + 1
        for worker in workers:
            worker.start()
        time.sleep(max(0.0, first + args.before - time.time()))
        sandbox.admin.set_faults(
            Faults(acceptance_regressions=[AcceptanceRegression(factor=args.factor)])
        )
        drift_at = time.time()
        time.sleep(max(0.0, first + args.before + args.after - time.time()))
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        time.sleep(2 * args.log_interval)  # the last lines close

        reader = ContainerLogReader(sandbox.client("logs"))
        records = sandbox.admin.traffic_records(ENDPOINT)
        policy = LivePolicy(acceptance_floor=args.floor, speculative_tokens=4, failure_limit=2)
        # The estimate of every interval (alert policy: the fold never stops), and the
        # rollback decision as onAcceptanceDrift: rollback takes it.
        watching = policy.model_copy(update={"acceptance_gates": False})
        state, decided = LiveState(), LiveState()
        rows: list[dict[str, Any]] = []
        for index in range(args.before + args.after):
            start, end = first + index, first + index + 1
            lines = reader.read(
                ENDPOINT,
                {VariantRole.CANDIDATE: "AllTraffic"},
                datetime.fromtimestamp(start, UTC),
                datetime.fromtimestamp(end, UTC),
            ).lines[VariantRole.CANDIDATE]
            observation = LiveObservation(
                interval_end=datetime.fromtimestamp(end, UTC),
                baseline=VariantInterval(invocations=0),
                candidate=VariantInterval(invocations=0, spec_lines=list(lines)),
            )
            judged = judge_interval(state, observation, watching, observation.interval_end)
            state = judged.state
            decided = judge_interval(decided, observation, policy, observation.interval_end).state
            found = state.candidate_acceptance
            accepted = drafted = 0
            for r in records:
                assert r.t_end is not None
                ended = r.wall_time + (r.t_end - r.t_start)
                if start <= ended < end:
                    accepted += r.accepted_tokens
                    drafted += r.draft_tokens
            check = next(c for c in judged.checks if c.name == "live_acceptance_rate")
            rows.append(
                {
                    "interval": index,
                    # The interval the regression began in, and every later one.
                    "drifted": end > drift_at,
                    "mixed": start < drift_at < end,
                    "true_rate": accepted / drafted if drafted else None,
                    "true_drafted": drafted,
                    "estimate": found.rate if found else None,
                    "low": found.low if found else None,
                    "high": found.high if found else None,
                    "drafted": found.drafted if found else 0,
                    "lines": found.lines if found else 0,
                    "verdict": check.verdict.value,
                    "decision": decided.decision.value,
                }
            )
    judged_rows = [r for r in rows if r["estimate"] is not None and r["true_rate"] is not None]
    errors = [abs(r["estimate"] - r["true_rate"]) for r in judged_rows]
    steady = [abs(r["estimate"] - r["true_rate"]) for r in judged_rows if not r["mixed"]]
    covered = [r["low"] <= r["true_rate"] <= r["high"] for r in judged_rows]
    drift_index = next(r["interval"] for r in rows if r["drifted"])
    below = next((r["interval"] for r in rows if r["verdict"] == "Fail"), None)
    rollback = next(
        (r["interval"] for r in rows if r["decision"] == LiveDecision.ROLLBACK.value), None
    )
    false_fails = sum(1 for r in rows if not r["drifted"] and r["verdict"] == "Fail")
    summary = {
        "intervals": len(rows),
        "mean_abs_error": sum(errors) / len(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "mean_abs_error_without_the_mixed_interval": sum(steady) / len(steady) if steady else None,
        "truth_inside_bounds": sum(covered) / len(covered) if covered else None,
        "drift_interval": drift_index,
        "first_below_floor_lag_intervals": None if below is None else below - drift_index,
        "rollback_lag_intervals": None if rollback is None else rollback - drift_index,
        "false_fails_before_drift": false_fails,
        "settings": vars(args) | {"out": str(args.out) if args.out else None},
    }
    result = {"summary": summary, "rows": rows}
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
