"""`endpoint-optimizer crd`: write the generated artefacts (the CRD and its field reference).

The CRD and the field tables come from the api models (`endpoint_optimizer.api.crd`); the
technique x instance rules, which need the instance type and so are checked by the
operator instead of the apiserver, come from `endpoint_optimizer.sagemaker.matrix`. This
module is the one place that puts both into docs/crd-reference.md, so that api imports
nothing above it.
"""

from __future__ import annotations

from pathlib import Path

import click

from endpoint_optimizer.api.crd import render_crd, render_docs
from endpoint_optimizer.sagemaker import instances, matrix


def matrix_section() -> list[str]:
    """The technique x instance rules and accelerator families, as Markdown lines."""
    return [
        "## Technique x instance rules (checked by the operator)",
        "",
        "A spec that breaks one of these gets phase Failed and a Terminal condition naming "
        "the rule, the field and what would be accepted, before any AWS call.",
        "",
        "| Rule | What it says |",
        "| --- | --- |",
        *(f"| `{rule}` | {text} |" for rule, text in matrix.RULES.items()),
        "",
        "| Family | Accelerator | FP8 | Memory per device (GiB) |",
        "| --- | --- | --- | --- |",
        *(
            f"| `{family}` | {a.name} | {'yes' if a.fp8 else 'no'} | {a.memory_gib or '?'} |"
            for family, a in instances.FAMILIES.items()
        ),
        "",
    ]


@click.command("crd")
@click.option(
    "-o",
    "--output",
    "outputs",
    type=click.Path(dir_okay=False, path_type=Path),
    multiple=True,
    help="Write the CRD YAML here instead of standard output; repeat for copies "
    "(e.g. the Helm chart's crds/).",
)
@click.option(
    "--docs",
    "docs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the Markdown field reference here (docs/crd-reference.md).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 naming each -o/--docs file that differs from the models.",
)
def crd_command(outputs: tuple[Path, ...], docs_path: Path | None, check: bool) -> None:
    """Print (or write) the OptimizedEndpoint CRD generated from the models.

    Regenerate everything after changing the api models:
    endpoint-optimizer crd -o crds/optimizedendpoint.yaml
    -o charts/endpoint-optimizer/crds/optimizedendpoint.yaml --docs docs/crd-reference.md
    """
    wanted = {path: render_crd() for path in outputs}
    if docs_path is not None:
        wanted[docs_path] = render_docs(matrix_section())
    if check:
        stale = [
            str(path)
            for path, text in wanted.items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text
        ]
        if stale:
            raise click.ClickException(
                f"stale: {', '.join(stale)}; rerun the same command without --check"
            )
        return
    if not outputs:
        click.echo(render_crd(), nl=False)
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
