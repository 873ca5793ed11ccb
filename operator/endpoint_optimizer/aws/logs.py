"""The container log reader: each variant's speculative-decoding lines from CloudWatch Logs.

SageMaker ships a serving container's stdout to the log group
`/aws/sagemaker/Endpoints/<endpoint>`, one stream per `<variant>/<instance-id>`. Each live
interval the operator reads the window since its previous read (the live judge's
`liveReadUntil`, so reads are incremental and never overlap) with FilterLogEvents, per
variant by stream-name prefix and with a filter pattern that keeps only the speculative
metrics lines; pages are bounded (`MAX_PAGES` x `PAGE_LIMIT` events), and a window that
does not fit keeps its first pages' lines and says so (`truncated`). A log group that does not exist
yet (the container has not logged) is no lines, not an error. IAM: `logs:FilterLogEvents`
on `arn:aws:logs:*:*:log-group:/aws/sagemaker/Endpoints/*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from endpoint_optimizer.analysis.series import VariantRole
from endpoint_optimizer.analysis.speclog import FILTER_PATTERN, SpecLine, parse_line

PAGE_LIMIT = 1000
MAX_PAGES = 10


def log_group(endpoint: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint}"


@dataclass(frozen=True)
class ContainerLogs:
    """What one read found: the parsed lines per variant role, and whether pages ran out."""

    lines: Mapping[VariantRole, tuple[SpecLine, ...]]
    truncated: bool = False


class ContainerLogReader:
    """FilterLogEvents over one endpoint's log group, one variant at a time."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def read(
        self,
        endpoint: str,
        variants: Mapping[VariantRole, str],
        start: datetime,
        end: datetime,
    ) -> ContainerLogs:
        found: dict[VariantRole, tuple[SpecLine, ...]] = {}
        truncated = False
        for role, variant in variants.items():
            lines, cut = self._variant(endpoint, variant, start, end)
            found[role] = lines
            truncated |= cut
        return ContainerLogs(found, truncated)

    def _variant(
        self, endpoint: str, variant: str, start: datetime, end: datetime
    ) -> tuple[tuple[SpecLine, ...], bool]:
        request: dict[str, Any] = {
            "logGroupName": log_group(endpoint),
            "logStreamNamePrefix": f"{variant}/",
            "startTime": int(start.timestamp() * 1000),
            # endTime is inclusive in CloudWatch Logs; the window is [start, end).
            "endTime": int(end.timestamp() * 1000) - 1,
            "filterPattern": FILTER_PATTERN,
            "limit": PAGE_LIMIT,
        }
        lines: list[SpecLine] = []
        for _ in range(MAX_PAGES):
            try:
                page = self.client.filter_log_events(**request)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    return (), False
                raise
            for event in page.get("events", []):
                line = parse_line(
                    str(event.get("logStreamName", "")),
                    int(event.get("timestamp", 0)),
                    str(event.get("message", "")),
                )
                if line is not None:
                    lines.append(line)
            token = page.get("nextToken")
            if not token:
                return tuple(lines), False
            request["nextToken"] = token
        return tuple(lines), True
