"""Optional extras: which pyproject extra brings a third-party package, and the one sentence a
command prints when it needs one that is not installed (`make run` installs the runtime set only)."""
from __future__ import annotations

import click

#: top-level module -> (pip name, extra of pyproject.toml that installs it)
PROVIDERS: dict[str, tuple[str, str]] = {
    "pyspark": ("pyspark", "spark"),
    "pyarrow": ("pyarrow", "spark"),
    "py4j": ("pyspark", "spark"),
    "pandas": ("pandas", "spark"),
    "grpc": ("grpcio", "spark"),
    "matplotlib": ("matplotlib", "labs"),
    "pydantic": ("pydantic", "labs"),
    "docker": ("docker", "labs"),
    "atheris": ("atheris", "fuzz"),
    "confluent_kafka": ("confluent-kafka", "interop"),
    "aiokafka": ("aiokafka", "interop"),
    "rocketmq": ("rocketmq", "interop"),
}


def missing_module(exc: BaseException) -> str | None:
    """The top-level name of an optional package that `exc` says is missing, else None."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    top = (exc.name or "").split(".")[0]
    return top if top in PROVIDERS else None


def missing_extra_message(module: str, what: str = "this command") -> str:
    pip_name, extra = PROVIDERS[module]
    return (f"{what} needs {pip_name}, which is not installed (`make run` installs the broker's runtime "
            f"dependencies only): run `make venv` for every extra, or `.venv/bin/pip install -e '.[{extra}]'`.")


class MissingExtra(click.ClickException):
    """A command needs an optional package: one sentence naming the make target or the extra."""

    def __init__(self, module: str, what: str = "this command"):
        super().__init__(missing_extra_message(module, what))
        self.module = module


class GuardedGroup(click.Group):
    """A click group whose commands, when they import a missing optional package, end with
    MissingExtra's sentence (exit 1) instead of a traceback."""

    def make_context(self, info_name, args, parent=None, **extra):
        argv = list(args)
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta.setdefault("rmq.argv", argv)
        return ctx

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            module = missing_module(exc)
            if module is None:
                raise
            raise MissingExtra(module, f"`{self._path(ctx)}`") from exc

    def _path(self, ctx: click.Context) -> str:
        """The command words the user typed (`rmq bench spark`), from the root's arguments."""
        words, cmd = [ctx.command_path], self
        for word in ctx.meta.get("rmq.argv", []):
            sub = cmd.get_command(ctx, word) if isinstance(cmd, click.Group) else None
            if sub is None:
                break
            words.append(word)
            cmd = sub
        return " ".join(words)


def placeholder_command(name: str, module: str, help_text: str) -> click.Command:
    """A command that stands in for one whose module could not be imported: any use prints the
    sentence (so `rmq lab run` says what to install rather than "No such command")."""

    @click.command(name, help=f"{help_text} (needs the {PROVIDERS[module][1]} extra: not installed)",
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                     "help_option_names": []})
    @click.pass_context
    def _cmd(ctx: click.Context) -> None:
        raise MissingExtra(module, f"`{ctx.command_path}`")

    return _cmd
