"""The benchmark's boundary structures: what to hit, how hard, and what came back.

Times are seconds. Absolute instants (`*_at`) are `time.monotonic()` readings of
this process, so they compare with anything else on the host that reads
CLOCK_MONOTONIC (the sandbox's traffic log does).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from endpoint_optimizer.api.camel import CamelModel
from endpoint_optimizer.bench.served_by import EngineSummary, ServedBy, summarize


class BenchClient(StrEnum):
    """Which client sends the requests (docs/benchmarking.md compares their cost)."""

    # One asyncio loop, aiohttp, botocore's SigV4 signer and credential chain, a fast
    # event-stream decoder (bench.lean).
    LEAN = "lean"
    # boto3's invoke_endpoint_with_response_stream on a thread per stream (bench.client).
    BOTO3 = "boto3"


class RequestFormat(StrEnum):
    """The request body shape the serving container expects."""

    LMI = "lmi"  # {"inputs", "parameters": {"max_new_tokens"}, "stream": true} (LMI, TGI)
    OPENAI = "openai"  # chat completions with stream_options.include_usage
    COMPLETIONS = "completions"  # OpenAI completions {"prompt"}, the same stream options


class BenchTarget(CamelModel):
    endpoint_name: str = Field(min_length=1, max_length=63)
    variant: str | None = Field(default=None, max_length=63)  # TargetVariant pinning
    # InferenceComponentName: the request goes to that component's copies (header
    # X-Amzn-SageMaker-Inference-Component); an endpoint built for components needs it.
    inference_component: str | None = Field(default=None, max_length=63)
    region: str | None = None  # None: the SDK's default chain
    endpoint_url: str | None = None  # None: the SDK's default (real SageMaker)
    content_type: str = "application/json"
    custom_attributes: str | None = None


class Slo(CamelModel):
    """A request is good when it succeeded and meets every bound that is set."""

    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)  # per-request mean inter-token latency
    e2e_s: float | None = Field(default=None, gt=0)


class DatasetItem(CamelModel):
    """One JSONL line of a prompt dataset: a prompt, chat messages, or a raw body."""

    prompt: str | None = None
    messages: list[dict[str, object]] | None = None
    body: dict[str, object] | None = None  # sent as is
    output_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_input(self) -> DatasetItem:
        if sum(x is not None for x in (self.prompt, self.messages, self.body)) != 1:
            raise ValueError("each dataset line needs exactly one of prompt, messages or body")
        return self


class BenchConfig(CamelModel):
    concurrency: list[int] = Field(default=[1], min_length=1)
    requests: int = Field(default=100, ge=1)  # measured requests per concurrency level
    warmup: int = Field(default=0, ge=0)  # the level's first requests, sent but not reported
    ramp_up_s: float = Field(default=0.0, ge=0)  # stagger the closed loop's slots over this
    input_tokens: int = Field(default=512, ge=1)
    output_tokens: int = Field(default=256, ge=1)
    # Standard deviations of the lengths: 0 sends every request at the mean; above it each
    # request's lengths are drawn from a normal distribution around the mean (as LLMPerf's
    # mean +- stddev), rounded, at least 1, seeded by (seed, request index).
    input_tokens_sd: float = Field(default=0.0, ge=0)
    output_tokens_sd: float = Field(default=0.0, ge=0)
    # Prompts stay out of the report's JSON: exclude=True.
    dataset: list[DatasetItem] | None = Field(default=None, exclude=True)
    request_format: RequestFormat = RequestFormat.LMI
    # Poisson arrivals at this rate (requests/s), with concurrency as a ceiling;
    # None: closed loop at fixed concurrency.
    rate: float | None = Field(default=None, gt=0)
    seed: int = 0
    slo: Slo = Field(default_factory=Slo)
    # Draft tokens per step, to convert the black-box acceptance length into a rate.
    num_speculative_tokens: int | None = Field(default=None, ge=1)
    read_timeout_s: float = Field(default=300.0, gt=0)
    client: BenchClient = BenchClient.LEAN
    # HTTP attempts per request, botocore's standard retry mode (throttling, 5xx,
    # connection errors before the stream starts). 1: no retries, so a throttled or failed
    # request is counted as one, not hidden behind the latency of its retry.
    max_attempts: int = Field(default=1, ge=1, le=10)
    # Python's GIL switch interval while the benchmark runs (restored after; None: leave
    # it). At the default 5 ms, a thread that stamped its send time can wait several
    # intervals for the GIL before its bytes leave, which reads as server TTFT;
    # 0.5 ms cut that from 34 ms to 4 ms (p50) at concurrency 64 on 2 cores.
    switch_interval_s: float | None = Field(default=0.0005, gt=0)
    # Saturation guard: above these p99 lags the client, not the server, is measured.
    # Send lag may also reach 10% of the median E2E: a closed loop whose requests end
    # together queues their successors' request building; that costs load, not accuracy.
    max_send_lag_p99_s: float = Field(default=0.05, gt=0)
    max_loop_lag_p99_s: float = Field(default=0.05, gt=0)
    max_wake_lag_p99_s: float = Field(default=0.02, gt=0)
    # Where the kernel timed every request, a proof that may stand in for the loop and wake
    # lag bounds: each reported TTFT and TPOT quantile known within max(the seconds, the
    # fraction of it) from the requests' stamps (bench/guard.py).
    max_stamp_error_s: float = Field(default=0.002, gt=0)
    max_stamp_error_fraction: float = Field(default=0.02, ge=0)
    run_id: str = "bench"
    # Client processes per concurrency level (None: one per streams_per_worker streams, see
    # runner.workers_for). Each runs the thread-per-request reader for its share of
    # the slots (or of the Poisson arrivals), so chunk timestamps stop queueing on one
    # GIL; all stamp with CLOCK_MONOTONIC, which compares across processes on Linux.
    workers: int | None = Field(default=None, ge=1)
    # Streams one client process carries when `workers` is None; the operator sets it from
    # its limits (bench.limits).
    streams_per_worker: int = Field(default=64, ge=1)

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(c < 1 for c in value):
            raise ValueError("concurrency levels must be >= 1")
        return value


class RequestSample(CamelModel):
    """Raw measurements of one request. Offsets are relative to `sent_at`."""

    index: int
    inference_id: str
    scheduled_at: float
    sent_at: float
    end_at: float
    client_queue_s: float  # send lag: sent_at - scheduled_at
    ttft_s: float | None = None
    e2e_s: float
    tpot_s: float | None = None
    itl_s: list[float] = Field(default_factory=list)  # one entry per token after the first read
    chunk_gaps_s: list[float] = Field(default_factory=list)  # one entry per chunk after the first
    chunk_offsets_s: list[float] = Field(default_factory=list)  # token-bearing chunk arrivals
    chunk_tokens: list[int] = Field(default_factory=list)
    output_tokens: int | None = None
    tokens_source: str = "unknown"  # usage | stream | tokenizer | unknown
    chunk_tokens_exact: bool = False
    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    invoked_variant: str | None = None
    # The container's label from CustomAttributes: engine=real|synthetic, why a synthetic
    # effect stood in (fallback), what the engine served without (omitted). None: the
    # container set no label.
    served_by: str | None = None
    fallback: str | None = None
    omitted: str | None = None
    error_kind: str | None = None
    error_message: str | None = None
    # HTTP attempts, retries included; TTFT and E2E run from the first attempt's send.
    attempts: int = 1
    # What timed the send and the tokens: `kernel`, the kernel's send and receive stamps
    # (bench/rxstamp.py), or `read`, the client's clock as its loop got to each read.
    clock: str = "read"
    # Kernel clock only: how much earlier than its stamp the first (TTFT) and the last
    # token-bearing chunk can have arrived. 0: exact, the chunk ended its socket read;
    # above: it shared a read with later bytes (the loop was busy). None: not known.
    # bench/guard.py turns them into a bound on each reported quantile.
    ttft_slack_s: float | None = None
    last_chunk_slack_s: float | None = None
    # ModelError's OriginalStatusCode (the container's own status), else the HTTP status
    # of an error response; None when the stream began.
    error_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class LevelPart(CamelModel):
    """One share of a level, as it merges: what one client process (or one shard pod)
    measured, before any statistic. Raw per-request samples, not histograms, so a merge
    is exact for every quantile; warm-up requests included (they count for the CPU per
    token). Instants are in the share's time base: this host's CLOCK_MONOTONIC for
    processes of one pod, seconds after the start barrier for shards (bench.shards)."""

    samples: list[RequestSample]
    send_lags: dict[int, float] = Field(default_factory=dict)  # by request index
    loop_times: list[float] = Field(default_factory=list)
    loop_lags: list[float] = Field(default_factory=list)
    wake_times: list[float] = Field(default_factory=list)
    wake_lags: list[float] = Field(default_factory=list)
    cpu_s: float = 0.0  # the share's CPU time over the level (all its threads)
    processes: int = 1  # client processes behind this share


class Distribution(CamelModel):
    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None


class Summary(CamelModel):
    ttft_s: Distribution
    itl_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    chunk_gap_s: Distribution
    client_queue_s: Distribution
    output_tokens: Distribution
    output_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float | None = None
    good_fraction: float | None = None  # errored requests count in the denominator
    error_rate: float
    errors: dict[str, int] = Field(default_factory=dict)


class ServerAcceptance(CamelModel):
    """From server counters: rate = accepted/drafted, length = 1 + accepted/drafts."""

    num_drafts: int | None
    num_draft_tokens: int
    num_accepted_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None


class BlackBoxAcceptance(CamelModel):
    """From the stream's chunk structure: tokens per decode chunk estimates E.

    E = decode tokens / decode chunks (the first chunk, prefill, is excluded). For
    k draft tokens per step, the drafted-token acceptance rate (vLLM's definition)
    is (E - 1) / k; the per-position probability alpha of Leviathan et al. solves
    E = (1 - alpha^(k+1)) / (1 - alpha). Valid where the server emits one chunk per
    engine step (vLLM); TGI streams each token as its own event, so E reads ~1.
    """

    decode_chunks: int
    decode_tokens: int
    mean_tokens_per_chunk: float | None
    num_speculative_tokens: int | None = None
    acceptance_rate: float | None = None
    alpha: float | None = None


class Acceptance(CamelModel):
    server: ServerAcceptance | None = None
    black_box: BlackBoxAcceptance


class Validity(CamelModel):
    valid: bool
    reasons: list[str] = Field(default_factory=list)
    send_lag_s: Distribution
    loop_lag_s: Distribution
    wake_lag_s: Distribution
    # Kernel-timed levels: how far each reported quantile can be from the true one
    # (ttft_p50 ... e2e_p99, seconds); None where a request was timed at its reads.
    stamp_error_s: dict[str, float] | None = None
    # The figures of stamp_error_s known less well than the guard's allowance (and not
    # vouched for by the lag bounds): the judges widen their intervals by these brackets.
    blurred_s: dict[str, float] = Field(default_factory=dict)


class Window(CamelModel):
    start_at: float
    end_at: float
    active_s: float  # time with at least one measured request in flight
    mean_in_flight: float  # achieved concurrency: sum of request durations / active_s
    client_cpu_s: float  # process CPU time over the level, warm-up included (all threads)
    client_cpu_s_per_1k_tokens: float | None = None  # over the same span's output tokens
    workers: int = 1  # client processes that shared the level (CPU above sums them all)
    # Share of the measured requests timed by the kernel's stamps (RequestSample.clock).
    kernel_clock_share: float | None = None


def kernel_clock_share(samples: Sequence[RequestSample]) -> float | None:
    """Window.kernel_clock_share over `samples` (None for none)."""
    if not samples:
        return None
    return sum(s.clock == "kernel" for s in samples) / len(samples)


class LevelReport(CamelModel):
    concurrency: int
    rate: float | None = None
    samples: list[RequestSample]
    summary: Summary
    acceptance: Acceptance
    validity: Validity
    window: Window

    # Plain float lists for the judges (successful requests only).
    def ttft_samples(self) -> list[float]:
        return [s.ttft_s for s in self.samples if s.ok and s.ttft_s is not None]

    def itl_samples(self) -> list[float]:
        return [x for s in self.samples if s.ok for x in s.itl_s]

    def tpot_samples(self) -> list[float]:
        return [s.tpot_s for s in self.samples if s.ok and s.tpot_s is not None]

    def e2e_samples(self) -> list[float]:
        return [s.e2e_s for s in self.samples if s.ok]

    def chunk_gap_samples(self) -> list[float]:
        return [x for s in self.samples if s.ok for x in s.chunk_gaps_s]


class BenchReport(CamelModel):
    target: BenchTarget
    config: BenchConfig
    levels: list[LevelReport]

    @property
    def valid(self) -> bool:
        return all(level.validity.valid for level in self.levels)

    def engine_summary(self) -> EngineSummary:
        """Which engine served the measured requests, from the containers' labels."""
        return summarize(
            ServedBy(s.served_by, s.fallback or "", s.omitted or "") if s.served_by else None
            for level in self.levels
            for s in level.samples
        )
