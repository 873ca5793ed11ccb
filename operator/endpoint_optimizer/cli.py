"""The `endpoint-optimizer` command: each subcommand lives in the room that owns it.

Subcommands are imported lazily so that `endpoint-optimizer crd` does not pay for
the sandbox's or the operator's imports, and so that one room's import error
does not break every other command.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "run": "endpoint_optimizer.controller.run:run_command",
    "crd": "endpoint_optimizer.generate:crd_command",
    "bench": "endpoint_optimizer.bench.cli:bench_command",
    "sandbox": "endpoint_optimizer.demo.cli:sandbox_command",
    "report": "endpoint_optimizer.report:report_command",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                raise click.ClickException(f"`{cmd_name}` is not available yet") from exc
            raise
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="endpoint-optimizer")
def main() -> None:
    """Make SageMaker LLM endpoints faster on the same GPU; roll back what regresses."""


if __name__ == "__main__":
    main()
