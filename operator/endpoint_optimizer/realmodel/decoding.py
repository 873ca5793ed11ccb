"""Greedy decoding loops for the real engine: static batches and prompt-lookup speculation.

Runs inside a worker process with torch imported. The loops are written out rather
than calling `generate()` so that every decode step is observable: each step
reports the tokens it produced per sequence (a speculative step produces several
at once), and speculation counts the draft tokens it proposed and accepted.

Prompt lookup (the n-gram method): the draft for the next step is the continuation
of the most recent earlier occurrence of the context's last n tokens (n = 3, 2, 1).
The target model verifies the draft in one forward pass; the longest agreeing
prefix plus the model's own next token are kept. The output is token-identical
to plain greedy decoding, so speculation changes speed, never answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# step callback: (sequence index in the batch, new token ids)
OnTokens = Callable[[int, list[int]], None]


@dataclass
class SpeculationCounters:
    draft_tokens: int = 0
    accepted_tokens: int = 0
    verify_passes: int = 0


@dataclass
class BatchResult:
    outputs: list[list[int]] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)


def lookup_draft(context: Sequence[int], k: int, max_ngram: int = 3) -> list[int]:
    """The continuation of the latest earlier match of the context's last n tokens."""
    if k <= 0:
        return []
    for n in range(max_ngram, 0, -1):
        if len(context) <= n:
            continue
        pattern = list(context[-n:])
        for start in range(len(context) - n - 1, -1, -1):
            if list(context[start : start + n]) == pattern:
                draft = list(context[start + n : start + n + k])
                if draft:
                    return draft
    return []


def greedy_batch(
    model: Any,
    torch: Any,
    cache_factory: Callable[[], Any],
    prompts: Sequence[Sequence[int]],
    max_new_tokens: Sequence[int],
    eos_token_id: int,
    pad_token_id: int,
    on_tokens: OnTokens,
) -> BatchResult:
    """Decode a static batch, left-padded, one token per sequence per step."""
    width = max(len(p) for p in prompts)
    rows = [[pad_token_id] * (width - len(p)) + list(p) for p in prompts]
    mask_rows = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    input_ids = torch.tensor(rows, dtype=torch.long)
    attention = torch.tensor(mask_rows, dtype=torch.long)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = cache_factory()
    result = BatchResult(outputs=[[] for _ in prompts], finish_reasons=["length" for _ in prompts])
    done = [limit <= 0 for limit in max_new_tokens]
    with torch.inference_mode():
        logits = model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1, :]
        next_positions = positions[:, -1:] + 1
        while not all(done):
            chosen = [int(t) for t in logits.argmax(-1).tolist()]
            for index, token in enumerate(chosen):
                if done[index]:
                    continue
                result.outputs[index].append(token)
                on_tokens(index, [token])
                if token == eos_token_id:
                    done[index] = True
                    result.finish_reasons[index] = "stop"
                elif len(result.outputs[index]) >= max_new_tokens[index]:
                    done[index] = True
            if all(done):
                break
            feed = [pad_token_id if done[i] else chosen[i] for i in range(len(chosen))]
            attention = torch.cat([attention, torch.ones((len(feed), 1), dtype=torch.long)], dim=1)
            logits = model(
                input_ids=torch.tensor([[t] for t in feed], dtype=torch.long),
                attention_mask=attention,
                position_ids=next_positions,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1, :]
            next_positions = next_positions + 1
    return result


def prompt_lookup(
    model: Any,
    torch: Any,
    cache_factory: Callable[[], Any],
    prompt: Sequence[int],
    max_new_tokens: int,
    num_speculative_tokens: int,
    eos_token_id: int,
    on_tokens: OnTokens,
    counters: SpeculationCounters | None = None,
) -> tuple[list[int], str, SpeculationCounters]:
    """Greedy decoding of one sequence with prompt-lookup drafts verified in one pass.

    `counters` (updated before each `on_tokens` call) lets the caller stream the
    running draft/accepted counts with the tokens.
    """
    counters = counters if counters is not None else SpeculationCounters()
    cache = cache_factory()
    context = list(prompt)
    with torch.inference_mode():
        prompt_ids = torch.tensor([context], dtype=torch.long)
        logits = model(input_ids=prompt_ids, past_key_values=cache, use_cache=True).logits
        # The first token streams as soon as prefill gives it, as a serving engine does:
        # speculation must not cost time to first token.
        first = int(logits[0, -1].argmax())
        output = [first]
        context.append(first)
        on_tokens(0, [first])
        finish = "stop" if first == eos_token_id else "length"
        # Invariant: the cache holds every context token but the last.
        while finish == "length" and len(output) < max_new_tokens:
            room = max_new_tokens - len(output)
            draft = lookup_draft(context, num_speculative_tokens)[: room - 1]
            step_input = [context[-1], *draft]
            verified = model(
                input_ids=torch.tensor([step_input], dtype=torch.long),
                past_key_values=cache,
                use_cache=True,
            ).logits[0]
            counters.verify_passes += 1
            # verified[i] is the model's choice after step_input[i].
            accepted = 0
            for offset, drafted in enumerate(draft):
                if int(verified[offset].argmax()) != drafted:
                    break
                accepted += 1
            counters.draft_tokens += len(draft)
            counters.accepted_tokens += accepted
            new = [*draft[:accepted], int(verified[accepted].argmax())]
            if eos_token_id in new:
                new = new[: new.index(eos_token_id) + 1]
                finish = "stop"
            output.extend(new)
            context.extend(new)
            on_tokens(0, new)
            # Keep the keys of the accepted tokens only; the rejected draft's go.
            excess = cache.get_seq_length() - (len(context) - 1)
            if excess > 0:
                cache.crop(-excess)
    return output, finish, counters
