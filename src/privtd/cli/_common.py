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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._files import atomic_write_text
from ..errors import PrivtdError, ValidationError
from ._names import FORMAT_NAMES, MECHANISM_NAMES

if TYPE_CHECKING:
    import pandas as pd

    from ..io import Imported

# This module and the command modules import only click and privtd's light modules at the top:
# numpy, pandas, scipy and numba load inside the commands that use them, so that
# `privtd --help` starts in a fraction of a second (docs/scale.md).

EXIT_ERROR = 2


# ---------------------------------------------------------------------- helpers
def _fail(message: str) -> None:
    click.echo(f"privtd: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


#: The output name that means standard output, as in most command-line tools.
STDOUT = "-"


def _write_output(path: str, text: str, private: bool = False) -> None:
    """Write an output file (``private``: 0600, for secrets), or standard output for ``-``."""
    if path == STDOUT:
        click.echo(text, nl=False)
    else:
        atomic_write_text(path, text, private=private)


def _atomic_csv(frame: pd.DataFrame | pd.Series, path: str, index: bool) -> None:
    """Write a table privtd made, its text escaped against spreadsheet formulas
    (:func:`privtd._csv.to_csv`)."""
    from .._csv import to_csv

    _write_output(path, to_csv(frame, index=index))


def _one_stdout(**outputs: str | None) -> None:
    """Refuse two outputs sent to standard output, which would interleave."""
    named = [f"--{name.replace('_', '-')}" for name, path in outputs.items() if path == STDOUT]
    if len(named) > 1:
        raise ValidationError(
            f"{' and '.join(named)} both name standard output ('-'); send one of them to a file."
        )


def _shown(path: str) -> str:
    return "standard output" if path == STDOUT else path


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


def _parse_params(pairs: tuple[str, ...], option: str = "-p/--param") -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValidationError(f"{option} takes KEY=VALUE. Got {pair!r}.")
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

    from .._csv import read_csv
    from .._files import refuse_spreadsheet

    refuse_spreadsheet(path)
    # Read as the answers are (privtd._csv), so a truth of integer labels with a blank cell
    # stays integers, and an unreadable file gets the same one-line error as in infer.
    try:
        frame = read_csv(path, ["task"])
    except FileNotFoundError:
        raise ValidationError(f"No such file: {path!r}. Check the path.") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(f"Cannot parse {path!r} as csv: {first}.") from None
    missing = [c for c in ("task", "truth") if c not in frame.columns]
    if missing:
        raise ValidationError(
            f"{path!r} lacks column(s) {missing}: expected ['task', 'truth'], found "
            f"{list(frame.columns)}."
        )
    # A blank truth is no known truth: leave the task out rather than compare with NaN.
    frame = frame[frame["truth"].notna().to_numpy()]
    if pd.api.types.is_integer_dtype(frame["truth"].dtype):  # nullable ints, blanks now gone
        frame = frame.astype({"truth": "int64"})
    if frame["task"].duplicated().any():
        dup = frame["task"][frame["task"].duplicated()].iloc[0]
        raise ValidationError(f"{path!r} names task {dup!r} twice. Give one truth per task.")
    return frame.set_index("task")["truth"]


def _delimiter(text: str | None) -> str | None:
    """``--delimiter``: one character, with ``tab`` and ``\\t`` for the tab a shell makes hard
    to type."""
    if text is None:
        return None
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";"}
    value = named.get(text.lower(), text)
    if len(value) != 1:
        raise ValidationError(
            f"--delimiter takes one character (or tab, comma, semicolon). Got {text!r}."
        )
    return value


def _read_answers(
    path: str,
    fmt: str,
    delimiter: str | None,
    task_col: str | None,
    worker_col: str | None,
    answer_col: str | None,
    keep_rejected: bool,
    **read: Any,
) -> Imported:
    """Answers and the export's golden tasks from ``path`` in ``fmt`` (docs/formats.md)."""
    from ..io import read as read_any

    if Path(path).is_dir():
        raise ValidationError(f"{path!r} is a directory. Pass a file.")
    return read_any(
        path,
        fmt,
        delimiter=_delimiter(delimiter),
        task=task_col,
        worker=worker_col,
        answer=answer_col,
        keep_rejected=keep_rejected,
        **read,
    )


def answer_source(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say how to read ANSWERS: its format, delimiter and columns."""
    options = [
        click.option(
            "--format",
            "fmt",
            type=click.Choice(FORMAT_NAMES),
            default="auto",
            show_default=True,
            help="ANSWERS' format: privtd's long table, or a platform's export (Toloka results "
            "TSV, MTurk batch results CSV, Label Studio JSON, Appen full report); 'auto' "
            "detects it from the file. See docs/formats.md.",
        ),
        click.option(
            "--delimiter",
            metavar="CHAR",
            help="The long table's cell delimiter (tab, comma, semicolon or one character; "
            "default: the one its header uses).",
        ),
        click.option(
            "--task-col",
            metavar="COLUMN",
            help="Column holding task ids (long table: default task; a platform export: "
            "overrides its own, docs/formats.md).",
        ),
        click.option(
            "--worker-col",
            metavar="COLUMN",
            help="Column holding worker ids (long table: default worker).",
        ),
        click.option(
            "--answer-col",
            metavar="COLUMN",
            help="Column holding answers (long table: default answer, or label); in an export "
            "with several answer fields, the one to read (Toloka output field, MTurk Answer "
            "field, Label Studio Choices name, Appen question).",
        ),
        click.option(
            "--keep-rejected",
            is_flag=True,
            help="Also use answers the platform marks rejected (Toloka, MTurk) or tainted "
            "(Appen); left out by default.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _read_reference(path: str) -> pd.Series:
    """Known truths: a CSV ``task,truth``, or the golden tasks of a platform export
    (docs/formats.md), so that inferred truths can be scored against an export's control
    tasks."""
    from ..io import FORMAT_LABELS, detect
    from ..io import read as read_any

    if not Path(path).is_file() or detect(path) == "long":
        from ..io._read import GOLD_COLUMN, _header

        if Path(path).is_file() and not str(path).lower().endswith((".parquet", ".pq")):
            names = _header(path)[0]
            if GOLD_COLUMN in names and "truth" not in names:
                # Answers with a gold column (privtd perturb keeps an export's there).
                gold = read_any(path).gold
                if gold is None:
                    raise ValidationError(
                        f"{path!r}'s gold column is empty: no known truth to score against. "
                        "Pass a CSV task,truth."
                    )
                click.echo(
                    f"privtd: note: scoring against the {len(gold)} golden task(s) in the gold "
                    f"column of {path!r}",
                    err=True,
                )
                return gold
        return _read_truth_csv(path)
    imported = read_any(path)
    label = FORMAT_LABELS[imported.format]
    if imported.gold is None:
        raise ValidationError(
            f"The {label} export {path!r} has no golden tasks to score against. Pass a CSV "
            "task,truth."
        )
    click.echo(
        f"privtd: note: scoring against the {len(imported.gold)} golden task(s) of the {label} "
        "export",
        err=True,
    )
    return imported.gold


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
    help="Answer type; 'auto': floats are numbers, the rest labels (in infer, a numeric-only "
    "method or mechanism reads integers as numbers).",
)
MECHANISM = click.option(
    "--mechanism", "-M", required=True, type=click.Choice(MECHANISM_NAMES), help="Local mechanism."
)


def mechanism_params(example: str = "") -> Callable[[Any], Any]:
    """The mechanism-parameter option, spelt alike in every command: ``-p``/``--param`` (or
    ``--mechanism-param``) is always the mechanism's; infer's estimator takes ``-P``."""
    example = f"; {example}" if example else ""
    return click.option(
        "--param",
        "-p",
        "--mechanism-param",
        "param",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Mechanism parameter, repeatable{example} (--mechanism-param is the same).",
    )


def _mechanism_keys(mechanism: str, calibrated: bool) -> list[str]:
    """The KEYs ``-p`` takes for a mechanism: its constructor's parameters, or with --epsilon
    those of its calibration; mf's task profiles are drawn from ``d`` and ``profile_seed``."""
    import inspect

    from ..mechanisms import MECHANISMS

    cls = MECHANISMS[mechanism]
    builds = [cls.from_epsilon] if calibrated else [cls]
    params = inspect.signature(builds[0]).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        builds.append(cls)  # a calibration that passes the rest on to the constructor
    keys: list[str] = []
    for build in builds:
        for p in inspect.signature(build).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in keys:
                keys.append(p.name)
    keys = [k for k in keys if k not in ("epsilon", "allow_float_leak")]
    if mechanism == "mf":
        keys = [k for k in keys if k != "profiles"] + ["d", "profile_seed"]
    return keys


def _check_mechanism_keys(mechanism: str, calibrated: bool, params: dict[str, Any]) -> None:
    keys = _mechanism_keys(mechanism, calibrated)
    unknown = [k for k in params if k not in keys]
    if unknown:
        where = " with --epsilon" if calibrated else ""
        raise ValidationError(
            f"unknown parameter {unknown[0]!r} for mechanism {mechanism}{where}; it takes: "
            f"{', '.join(keys) or 'none'} (-p KEY=VALUE; see privtd epsilon -M {mechanism})."
        )


#: Above this many labels a categorical read is suspect (see :func:`_warn_label_set`).
MAX_LABELS = 100


def _warn_mixed(data: Any, column: str | None) -> None:
    """Warn, in one line, when categorical answers mix numbers and words: a score column with
    a stray word is read as text labels, so "3" and "yes" both become labels."""
    from ..answers import mixed_example

    if not data.is_categorical:
        return
    example = mixed_example(data.labels)
    if example is None:
        return
    number, word = example
    click.echo(
        f"privtd: warning: column {column or 'answer'!r} mixes numbers and words (e.g. "
        f"{number!r} and {word!r}): every answer is read as a label, the numbers too. Fix the "
        "words if the answers are numbers; leave them if both are labels.",
        err=True,
    )


def _warn_label_set(data: Any, column: str | None = None) -> None:
    """Warn when categorical answers have so many distinct labels that they are likely numbers
    read as labels: more than MAX_LABELS, or (past 20) more labels than half the answers; and
    when they mix numbers and words (:func:`_warn_mixed`, ``column`` naming the column).

    Crowdsourcing label sets run from 2 to a few dozen classes; every categorical model here
    learns per label (a K x K confusion per worker for Dawid-Skene, a K-vector per task), so its
    cost grows with K and, once most labels are given once, there is nothing to agree on.
    """
    if not data.is_categorical:
        return
    _warn_mixed(data, column)
    n_labels, n_answers = data.n_labels, data.n_answers
    if n_labels <= MAX_LABELS and (n_labels <= 20 or 2 * n_labels <= n_answers):
        return
    import pandas as pd

    numbers = pd.api.types.is_numeric_dtype(data.labels.dtype)
    advice = (
        "They look like numbers: pass --kind numeric to read them as numbers (a numeric "
        "method such as gtm, mean or median does so by itself)."
        if numbers
        else "Check that --answer-col names the answer column."
    )
    click.echo(
        f"privtd: warning: the answers are read as {n_labels:,} distinct labels among "
        f"{n_answers:,} answers; a categorical method learns little per label and slows down "
        f"with their number. {advice}",
        err=True,
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
    "plan": "plan:plan_cmd",
    "audit": "privacy:audit_cmd",
    "attack": "privacy:attack_cmd",
    "secure-em": "secure:secure_em_cmd",
    "cluster-certs": "cluster:cluster_certs",
    "reproduce": "reproduce:reproduce",
    "serve": "service:serve",
    "requester": "service:requester",
    "campaign": "service:campaign",
    "client": "service:client",
}


#: The commands resolved in this run, the one that runs last: main's error handler names its
#: option for the parameter an error is about (:func:`_flag_hint`).
_running: list[click.Command] = []


class TrackingGroup(click.Group):
    """A group that records the subcommand it runs, for :func:`_flag_hint`."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            _running.append(command)
        return name, command, rest


class LazyGroup(TrackingGroup):
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


#: Library parameter names the CLI spells otherwise: the name of the click parameter that sets
#: them, where a command has it.
OPTION_OF_PARAM = {
    "method_params": "method_param",
    "mechanism_params": "param",
    "format": "fmt",
    "task": "task_col",
    "worker": "worker_col",
    "answer": "answer_col",
    "question": "answer_col",
    "ca_file": "tls_ca_file",
    "cert": "tls_cert",
    "key": "tls_key",
    "max_answers_per_worker": "max_answers",
}


#: Hints a command gives for a parameter its own options do not set: command path (as typed
#: after privtd) -> {library parameter: hint}. Looked up before the command's options.
COMMAND_HINTS = {
    "evaluate": {"gold": "privtd infer --gold, or --no-gold for an export's"},
    "infer": {"clip": "privtd perturb --clip LOW,HIGH"},
    "serve": {"requester_token": "privtd requester rotate --db URL ID"},
    "requester revoke": {"requester_id": "privtd requester list --db URL"},
    "requester rotate": {"requester_id": "privtd requester list --db URL"},
    "campaign create": {"max_epsilon": "the operator's privtd serve --max-epsilon"},
}

#: Hints for parameters only another command sets, whichever command runs; looked up after
#: the command's own options.
ELSEWHERE_HINTS = {
    "per_answer": "privtd client ceiling --per-answer X",
    "lifetime": "privtd client ceiling --lifetime X",
}


def _option_text(option: click.Option) -> str:
    """``-P/--method-param``: the short spelling and the first long one."""
    short = [o for o in option.opts if not o.startswith("--")]
    long = [o for o in option.opts if o.startswith("--")]
    return "/".join(short[:1] + long[:1])


def _mechanism_key(name: str) -> bool:
    """Whether ``name`` is a parameter ``-p KEY=VALUE`` sets: one some mechanism is built
    with (:func:`_mechanism_keys` leaves out the same two)."""
    import inspect

    from ..mechanisms import MECHANISMS

    return name not in ("epsilon", "allow_float_leak") and any(
        name in inspect.signature(build).parameters
        for cls in MECHANISMS.values()
        for build in (cls, getattr(cls, "from_epsilon", cls))
    )


def _flag_hint(param: str | tuple[str, ...] | None) -> str:
    """``(CLI: --on-missing)``: the option(s) of the command being run that set the library
    parameter(s) an error names; empty where the command has none."""
    if not param or not _running:
        return ""
    command = _running[-1]
    options = {p.name: p for p in command.params if isinstance(p, click.Option)}
    fixed = COMMAND_HINTS.get(" ".join(c.name or "" for c in _running), {})
    flags = []
    for name in (param,) if isinstance(param, str) else param:
        option = options.get(OPTION_OF_PARAM.get(name, name)) or options.get(name)
        if name in fixed:
            flags.append(fixed[name])
        elif option is not None:
            flags.append(_option_text(option))
        elif "param" in options and _mechanism_key(name):
            flags.append(f"-p {name}=VALUE")
        elif name in ELSEWHERE_HINTS:
            flags.append(ELSEWHERE_HINTS[name])
    return f" (CLI: {', '.join(flags)})" if flags else ""


def _with_hint(message: str, param: str | tuple[str, ...] | None) -> str:
    """The message with the flag hint, inside its closing period."""
    try:
        hint = _flag_hint(param)
    except Exception:  # the hint is a courtesy: a fault in it must not hide the message
        hint = ""
    if not hint:
        return message
    return f"{message[:-1]}{hint}." if message.endswith(".") else f"{message}{hint}"


def _echo_note(note: str) -> None:
    """A reader's note on stderr, with the option for the parameter it names (io's ``Note``)."""
    click.echo(f"privtd: note: {_with_hint(note, getattr(note, 'param', None))}", err=True)


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    text = _with_hint(str(message), getattr(message, "param", None))
    click.echo(f"privtd: warning: {text}", err=True)


def _is_parser_error(exc: Exception) -> bool:
    # pandas' CSV errors are the user's input, not a bug; pandas is only loaded if a command
    # read a CSV, so look it up rather than import it for the check.
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(exc, pd.errors.ParserError)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every expected failure into one line and exit code 2."""
    warnings.showwarning = _show_warning
    _running.clear()
    try:
        cli.main(args=argv, prog_name="privtd", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted")
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PrivtdError as exc:
        _fail(_with_hint(str(exc), exc.param))
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
