"""Helpers every ``privtd`` command shares, the command group and the entry point.

Every error is one line on stderr and a non-zero exit, never a traceback; output files are
written to a temporary name and renamed, so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from .._files import atomic_write_text
from ..errors import PrivtdError, ValidationError
from ._names import MECHANISM_NAMES

if TYPE_CHECKING:
    import pandas as pd

# This module and the command modules import only click and privtd's light modules at the top:
# numpy, pandas, scipy and numba load inside the commands that use them, so that
# `privtd --help` starts in a fraction of a second (docs/scale.md).

EXIT_ERROR = 2


# ---------------------------------------------------------------------- helpers
def _fail(message: str) -> None:
    click.echo(f"privtd: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _atomic_csv(frame: pd.DataFrame, path: str, index: bool) -> None:
    atomic_write_text(path, frame.to_csv(index=index))


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    return text


def _parse_params(pairs: tuple[str, ...]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValidationError(f"--param takes KEY=VALUE. Got {pair!r}.")
        key, value = pair.split("=", 1)
        params[key.strip().replace("-", "_")] = _parse_value(value.strip())
    return params


def _mechanism_params(mechanism: str, params: dict[str, Any], n_tasks: int) -> dict[str, Any]:
    """CLI parameters as constructor arguments; for ``mf`` the requester's public task profiles
    are drawn here from ``d`` (default 10) and ``profile_seed`` (default 0)."""
    if mechanism == "mf":
        from ..mechanisms import task_profiles

        d = params.pop("d", 10)
        seed = params.pop("profile_seed", 0)
        params["profiles"] = task_profiles(n_tasks, d, rng=seed)
    return params


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """EM's progress on stderr, shown on a terminal (or when forced): the iteration and the
    time elapsed. No bar and no ETA: most fits stop at their tolerance long before
    ``max_iter``, so a bar up to it would promise a wait that never comes."""
    if not enabled:
        yield None
        return
    import time

    state: dict[str, Any] = {"start": time.perf_counter(), "shown": 0.0, "n": 0}

    def line(n_iter: int, max_iter: int | None) -> str:
        elapsed = time.perf_counter() - state["start"]
        if max_iter is None:  # the last line, padded over the longer running one
            return f"\r{label}: {n_iter} iterations in {elapsed:.1f} s".ljust(60)
        return f"\r{label}: iteration {n_iter} (at most {max_iter}), {elapsed:.1f} s elapsed"

    def tick(n_iter: int, max_iter: int) -> None:
        state["n"] = n_iter
        now = time.perf_counter()
        if now - state["shown"] >= 0.1:  # a few redraws a second, not one per iteration
            state["shown"] = now
            click.echo(line(n_iter, max_iter), nl=False, err=True)

    try:
        yield tick
    finally:
        if state["n"]:
            click.echo(line(state["n"], None), err=True)


def _read_truth_csv(path: str) -> pd.Series:
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype={"task": str})
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValidationError(
            f"Cannot parse {path!r} as CSV: {str(exc).splitlines()[0]}."
        ) from None
    missing = [c for c in ("task", "truth") if c not in frame.columns]
    if missing:
        raise ValidationError(
            f"{path!r} lacks column(s) {missing}: expected ['task', 'truth'], found "
            f"{list(frame.columns)}."
        )
    if frame["task"].duplicated().any():
        dup = frame["task"][frame["task"].duplicated()].iloc[0]
        raise ValidationError(f"{path!r} names task {dup!r} twice. Give one truth per task.")
    return frame.set_index("task")["truth"]


# ---------------------------------------------------------------------- commands
# Options several commands share, spelt once.
ON_DUPLICATE = click.option(
    "--on-duplicate",
    type=click.Choice(["error", "first", "last", "majority", "mean"]),
    default="error",
    show_default=True,
    help="Repeated (task, worker) pairs.",
)
ANSWER_KIND = click.option(
    "--kind",
    type=click.Choice(["auto", "categorical", "numeric"]),
    default="auto",
    show_default=True,
    help="Answer type; 'auto': floats are numeric, the rest labels.",
)
MECHANISM = click.option(
    "--mechanism", "-M", required=True, type=click.Choice(MECHANISM_NAMES), help="Local mechanism."
)


def mechanism_params(example: str = "") -> Callable[[Any], Any]:
    """The mechanism-parameter option, spelt as every command accepts it (``-p``/``--param``
    outside infer, ``--mechanism-param`` everywhere)."""
    example = f"; {example}" if example else ""
    return click.option(
        "--param",
        "-p",
        "--mechanism-param",
        "param",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Mechanism parameter, repeatable{example} (--mechanism-param is the same, as "
        "infer spells it).",
    )


def _note_pooled_interval(low: float, high: float) -> None:
    """Where the reports say little, AwareNull's learned prior takes the tasks to the pooled
    answers: say so when the release fixes their median to no better than one score."""
    if high - low > 1.0:
        click.echo(
            f"privtd: note: this release fixes the pooled answers' median only to "
            f"{low:.2f}-{high:.2f} (bootstrap, nominal 90%); most tasks' truths follow it "
            "at this epsilon and sparsity, so treat them as uncertain.",
            err=True,
        )


#: Each command's name -> "module:attribute" of its click object in this package.
COMMANDS = {
    "infer": "infer:infer",
    "evaluate": "infer:evaluate_cmd",
    "datasets": "infer:datasets_group",
    "demo": "infer:demo",
    "perturb": "privacy:perturb",
    "epsilon": "privacy:epsilon_cmd",
    "audit": "privacy:audit_cmd",
    "attack": "privacy:attack_cmd",
    "secure-em": "secure:secure_em_cmd",
    "reproduce": "reproduce:reproduce",
    "serve": "service:serve",
    "requester": "service:requester",
    "campaign": "service:campaign",
    "client": "service:client",
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is asked for, so that
    ``privtd infer`` does not load the service's or the secure protocol's code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(f".{module}", __package__), attr)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="privtd")
def cli() -> None:
    """privtd: privacy-preserving truth discovery for crowdsourcing."""


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    click.echo(f"privtd: warning: {message}", err=True)


def _is_parser_error(exc: Exception) -> bool:
    # pandas' CSV errors are the user's input, not a bug; pandas is only loaded if a command
    # read a CSV, so look it up rather than import it for the check.
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(exc, pd.errors.ParserError)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every expected failure into one line and exit code 2."""
    warnings.showwarning = _show_warning
    try:
        cli.main(args=argv, prog_name="privtd", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted")
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PrivtdError as exc:
        _fail(str(exc))
    except ImportError as exc:
        if "pip install" not in str(exc):  # not a missing extra: a bug, handled below
            if os.environ.get("PRIVTD_DEBUG"):
                raise
            _fail(f"internal error (ImportError: {exc}); please report it")
        _fail(str(exc))  # an optional extra is missing; the message names the install line
    except OSError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except MemoryError:
        _fail("out of memory; try a smaller input or a machine with more memory")
    except Exception as exc:  # a bug: still one line, with a way to see the traceback
        if _is_parser_error(exc):
            _fail(f"{type(exc).__name__}: {exc}")
        if os.environ.get("PRIVTD_DEBUG"):
            raise
        _fail(
            f"internal error ({type(exc).__name__}: {exc}); please report it, and rerun with "
            "PRIVTD_DEBUG=1 for the traceback"
        )
