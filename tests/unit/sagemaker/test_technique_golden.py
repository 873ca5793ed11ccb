"""The techniques table changed no request: every case builds what the golden file pins.

`golden/techniques.jsonl` was written from the tree before `sagemaker/techniques/`
existed (commit named in the file's history), by
`python -m tests.unit.sagemaker.technique_cases`. Each row holds a digest of everything
built for one case (matrix violations, plan errors, the CreateModel, CreateOptimizationJob,
CreateTrainingJob and S3 upload requests, and the sandbox's serving profile of the
candidate); the examples are kept in full so a difference there reads as a diff.
"""

from __future__ import annotations

import json
from typing import Any

from tests.unit.sagemaker.technique_cases import GOLDEN, build, cases, digest


def _golden() -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    return {row["case"]: row for row in rows}


def test_every_case_builds_byte_identical_requests_and_profiles() -> None:
    golden = _golden()
    built = {case: build(spec) for case, spec in cases()}
    assert set(built) == set(golden), "the case list changed: regenerate from main, not here"
    for case, value in built.items():
        if "built" in golden[case]:
            assert value == golden[case]["built"], case
    changed = sorted(
        case for case, value in built.items() if digest(value) != golden[case]["sha256"]
    )
    assert changed == [], f"{len(changed)} cases differ, e.g. {changed[:5]}"


def test_the_cases_cover_every_path() -> None:
    golden = _golden()
    kinds = {
        key
        for row in golden.values()
        for key in ("specError", "violations", "sandbox")
        if key in row.get("built", {})
    }
    assert len(golden) > 1000 and {"violations", "sandbox"} <= kinds
