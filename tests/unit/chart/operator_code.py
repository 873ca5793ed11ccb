"""Which source files run in the operator: the import closure of `endpoint-optimizer run`.

The RBAC and IAM tests read these files for Kubernetes and AWS calls. Starting from the
run command's module and following every `import` (including those inside functions,
which is how the runner loads the handlers) leaves out what never runs in the operator
pod: the sandbox, the demo, the bench and report CLIs, the CRD generator. `sandbox/` and
`jobs/` are left out even when imported: the sandbox stands in for AWS in tests, and
jobs/ run inside SageMaker jobs under their own role.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[3] / "operator"
ENTRYPOINT = "endpoint_optimizer.controller.run"  # cli.COMMANDS["run"]
NOT_IN_OPERATOR = ("endpoint_optimizer.sandbox", "endpoint_optimizer.jobs")


def _path(module: str, root: Path) -> Path | None:
    base = root / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str, root: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            # `from package import module` imports a module, not only a name.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    closure: set[str] = set()
    for name in found:
        parts = name.split(".")
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        closure.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {name for name in closure if _path(name, root) is not None}


def operator_modules(root: Path = SOURCE_ROOT, entrypoint: str = ENTRYPOINT) -> dict[str, Path]:
    """Module name -> file, for every module `endpoint-optimizer run` imports."""
    seen: dict[str, Path] = {}
    queue = [entrypoint]
    while queue:
        module = queue.pop()
        if module in seen or module.startswith(NOT_IN_OPERATOR):
            continue
        path = _path(module, root)
        if path is None:
            continue
        seen[module] = path
        queue.extend(_imports(path, module, root) - set(seen))
    return seen
