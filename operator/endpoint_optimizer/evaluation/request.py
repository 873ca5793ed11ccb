"""The body of one eval request, in the format the endpoint serves (pure).

Sampling is fixed so that the A/A noise is what the engine makes it: greedy decoding
(LMI/TGI `do_sample: false`; OpenAI `temperature: 0`) and a seed where the container
honours one (vLLM's `seed`, LMI's and TGI's `parameters.seed`). For `chat` the prompt is
one user message and the container applies the model's chat template, as it does for the
endpoint's users; `lmi` and `completions` send the prompt as written.
"""

from __future__ import annotations

from typing import Any

from endpoint_optimizer.api import RequestFormat


def eval_body(
    prompt: str, max_new_tokens: int, request_format: RequestFormat, seed: int
) -> dict[str, Any]:
    if request_format is RequestFormat.CHAT:
        return {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_new_tokens,
            "temperature": 0,
            "seed": seed,
        }
    if request_format is RequestFormat.COMPLETIONS:
        return {"prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0, "seed": seed}
    return {
        "inputs": prompt,
        "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False, "seed": seed},
    }
