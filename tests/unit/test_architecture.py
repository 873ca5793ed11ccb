"""The import direction of docs/architecture.md, checked on the source tree.

controller -> aws -> pipeline -> sagemaker / analysis / evaluation -> api: no package
imports one above it, the graph has no cycle, and nothing in the operator imports the
tools around it (sandbox, demo, report, ...).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "endpoint_optimizer"

# Higher imports lower; equal ranks do not import each other (no cycles between them).
RANK = {
    "api": 0,
    "jobs": 0,
    "logs": 0,
    "analysis": 1,
    "bench": 1,
    "sagemaker": 1,
    "evaluation": 2,
    "metrics": 3,
    "pipeline": 3,
    "aws": 4,
    "controller": 5,
}
TOOLS = {"sandbox", "demo", "realmodel", "report", "generate", "cli"}


def imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        source = relative.parts[0] if len(relative.parts) > 1 else relative.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "endpoint_optimizer":
                continue
            targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            for target in targets:
                if target != source and (target in RANK or target in TOOLS):
                    graph[source][target].add(str(relative))
    return graph


def test_no_package_of_the_operator_imports_one_above_it_or_a_tool() -> None:
    wrong = [
        f"{source} -> {target} ({', '.join(sorted(files))})"
        for source, targets in imports().items()
        if source in RANK
        for target, files in targets.items()
        if target in TOOLS or RANK[target] >= RANK[source]
    ]
    assert wrong == []


def test_the_operator_s_package_graph_has_no_cycle() -> None:
    # The tools may import each other (`endpoint-optimizer sandbox` runs the demo, which
    # runs the sandbox); the operator's packages may not.
    graph = {
        source: {t for t in targets if t in RANK}
        for source, targets in imports().items()
        if source in RANK
    }
    seen: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> None:
        assert node not in path, " -> ".join([*path, node])
        if node in seen:
            return
        path.append(node)
        for target in graph.get(node, ()):
            visit(target)
        path.pop()
        seen.add(node)

    for node in graph:
        visit(node)
