"""Plan every OptimizedEndpoint in examples/ the way the operator's first wake-up does.

Run as a script by an installed operator's interpreter (the clean virtualenv of
test_install.py, or any install): it imports only the installed `endpoint_optimizer` and
PyYAML, and prints one JSON line per resource: {"resource", "image", "planned", "error"}.
`--image URI` sets spec.model.image first (the "image set" column of the plan table).
`--jumpstart-metadata DIR` reads JumpStart metadata from DIR (a region's content bucket
laid out as files, as the sandbox serves it) instead of S3.

Planned means: the baseline model, the optimization or training job and the candidate
model can all be built (the candidate from a completed job), with no AWS call.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from endpoint_optimizer.api import parse_spec
from endpoint_optimizer.pipeline import plan
from endpoint_optimizer.pipeline.model import JobView
from endpoint_optimizer.sagemaker.naming import Owner


def _sources(spec: Any, metadata: Path | None) -> Any:
    """JumpStart specs read from a directory laid out like the region's content bucket."""
    try:
        from endpoint_optimizer.sagemaker import jumpstart
    except ImportError:  # an operator from before JumpStart resolution
        return None
    if metadata is None:
        return None

    def read(key: str) -> bytes:
        return (metadata / key).read_bytes()

    return jumpstart.resolve_sources(spec, read)


def plan_resource(doc: dict[str, Any], image: str | None, metadata: Path | None) -> dict[str, Any]:
    name = f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"
    raw = json.loads(json.dumps(doc["spec"]))
    if image is not None:
        raw["model"]["image"] = image
    result: dict[str, Any] = {"resource": name, "image": image is not None}
    try:
        spec = parse_spec(raw)
        names = plan.Names.of(Owner(doc["metadata"]["namespace"], doc["metadata"]["name"], "u"), 1)
        sources = _sources(spec, metadata)
        kwargs = {"sources": sources} if sources is not None else {}
        plan.baseline_model(spec, names, **kwargs)
        job = plan.optimization_job(spec, names, **kwargs)
        trained = plan.training_job(spec, names, **kwargs)
        view = None
        if job is not None or trained is not None:
            view = JobView(
                names.job, "COMPLETED", output_s3_uri="s3://out/job/", recommended_image=""
            )
        plan.candidate_model(spec, names, view, **kwargs)
    except Exception as exc:  # the table records why a resource did not plan
        result |= {"planned": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
        return result
    return result | {"planned": True, "error": ""}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("examples", type=Path)
    parser.add_argument("--image")
    parser.add_argument("--jumpstart-metadata", type=Path)
    args = parser.parse_args(argv)
    for path in sorted(args.examples.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == "OptimizedEndpoint":
                row = plan_resource(doc, args.image, args.jumpstart_metadata)
                print(json.dumps({"file": path.name, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
