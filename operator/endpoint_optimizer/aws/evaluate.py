"""Run the eval set on one variant (InvokeEndpoint pinned with TargetVariant) and read answers.

The same items go to baseline and candidate, so the gate can pair them. Answers
are read in the worker thread (the response body is a blocking stream); prompts
and answers never reach a log line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from endpoint_optimizer.api import RequestFormat
from endpoint_optimizer.aws.clients import AwsClients
from endpoint_optimizer.aws.errors import classify
from endpoint_optimizer.bench.served_by import ServedBy, parse_served_by
from endpoint_optimizer.evaluation.request import eval_body
from endpoint_optimizer.pipeline.model import EvalAnswers

_CONCURRENCY = 4


def answer_text(payload: Any) -> str:
    """The generated text from an LMI/TGI (`generated_text`) or OpenAI answer (`choices`:
    a chat `message.content`, or a completion's `text`)."""
    if isinstance(payload, list) and payload:
        return answer_text(payload[0])
    if not isinstance(payload, dict):
        return str(payload)
    if "generated_text" in payload:
        return str(payload["generated_text"])
    choices = payload.get("choices")
    if isinstance(choices, list) and choices:
        first = choices[0]
        if isinstance(first, dict):
            message = first.get("message")
            if isinstance(message, dict) and "content" in message:
                return str(message["content"])
            return str(first.get("text", ""))
    return ""


async def labelled_answers(
    aws: AwsClients,
    region: str,
    endpoint: str,
    variant: str,
    prompts: Sequence[str],
    max_new_tokens: int,
    answered: Callable[[], None] | None = None,
    *,
    request_format: RequestFormat = RequestFormat.LMI,
    seed: int = 0,
    component: bool = False,
) -> EvalAnswers:
    """Answers with each response's CustomAttributes engine label (None where unset).

    `answered`: called after each answer (the measurement's progress). The body is
    `request_format`'s, with greedy sampling and `seed` (evaluation/request.py).
    `component`: `variant` names an inference component (InferenceComponentName), not a
    production variant (TargetVariant).
    """
    pin = {"InferenceComponentName": variant} if component else {"TargetVariant": variant}
    what = f"inference component {variant}" if component else f"variant {variant}"
    client = aws.client("sagemaker-runtime", region)
    gate = asyncio.Semaphore(_CONCURRENCY)

    def invoke(prompt: str) -> tuple[str, ServedBy | None]:
        body = eval_body(prompt, max_new_tokens, request_format, seed)
        try:
            response = client.invoke_endpoint(
                EndpointName=endpoint,
                **pin,
                ContentType="application/json",
                Accept="application/json",
                Body=json.dumps(body).encode(),
            )
            raw: bytes = response["Body"].read()
        except Exception as exc:
            raise classify(exc, "InvokeEndpoint", f"endpoint {endpoint} {what}") from exc
        served = parse_served_by(response.get("CustomAttributes"))
        try:
            return answer_text(json.loads(raw)), served
        except json.JSONDecodeError:
            return raw.decode(errors="replace"), served

    async def one(prompt: str) -> tuple[str, ServedBy | None]:
        async with gate:
            result: tuple[str, ServedBy | None] = await aws.run(lambda: invoke(prompt))
        if answered is not None:
            answered()
        return result

    results = await asyncio.gather(*(one(p) for p in prompts))
    return EvalAnswers([text for text, _ in results], [served for _, served in results])
