"""Clients of the collection service. A worker perturbs on its own device and sends only the
result; a requester creates campaigns and reads the aggregated results.

    from privtd.client import Requester, Worker
    requester = Requester("http://127.0.0.1:8000", token)
    campaign = requester.create_campaign("smiles", ["img-1", "img-2"], "one-layer", epsilon=1.0,
                                         labels=["smile", "no smile"], budget=10.0)
    code = requester.issue_codes(campaign["id"])["codes"][0]      # handed to alice
    worker = Worker.enrol("http://127.0.0.1:8000", campaign["id"], "alice", state="alice.json",
                          code=code)
    worker.submit({"img-1": "smile", "img-2": "no smile"})
    result = requester.aggregate(campaign["id"])

The worker's state file keeps its token, what it has spent of its privacy budget, and any
submission not yet acknowledged. A submission is perturbed once and written there (with its
idempotency key) before it is sent, so a retry, even after this process died, sends the same
perturbed values under the same key: perturbing again would spend the budget twice, and the
server stores a key's reports once. A submission the server refuses for good (a 4xx) is counted
as spent all the same, since the server received it, and dropped from the state: it is never
sent again (``Worker.resend``).

Each :meth:`Worker.submit` is one release under one private draw: the mechanism's
``perturb_worker`` runs once, with fresh randomness from the operating system, so two-layer's
flip probability ``f_u`` (exp-gaussian's variance, two-layer-null's budget) is drawn afresh for
each submission and shared by that submission's answers only (the page does the same). The
figures apply per draw: a submission of ``n`` answers keeps ``answer_epsilon(n)`` per answer,
given the worker's other answers (those of other submissions are independent of it), and costs
``release_epsilon(n)`` for all ``n`` together; submissions add up.

The worker's own ceiling (:class:`Ceiling`, a JSON file next to the state files unless told
otherwise) caps the epsilon per answer, given the worker's other answers of the same draw, of
what the worker sends, and the total epsilon spent over all its campaigns; the client refuses a
campaign or a submission past it before enrolling, perturbing or sending anything, computing
every figure from the natural parameters it perturbs with, whatever the server says.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._files import atomic_write_text
from .errors import (
    BudgetExceededError,
    CeilingExceededError,
    PrivtdError,
    ServiceError,
    ValidationError,
)
from .mechanisms import MECHANISMS, Accountant, Budget
from .mechanisms._base import Mechanism

#: The most reports one submission may carry (the server's limit): the most answers a worker
#: releases under one draw, unless the mechanism releases the whole row.
MAX_REPORTS = 20_000

#: The worker's defaults (docs/service.md, "The worker's ceiling"). Per answer: at epsilon 3,
#: randomized response over two labels still sends the wrong label with probability 0.047, so
#: a report is evidence, not a confession; past it the noise hides little (e^3 = 20-fold odds).
DEFAULT_MAX_EPSILON_PER_ANSWER = 3.0
#: Over every campaign: the sum of the epsilons spent (basic composition), a cap on what any
#: number of campaigns together can learn about one worker. A backstop, not a strong guarantee.
DEFAULT_MAX_LIFETIME_EPSILON = 100.0
#: The ceiling's file when none is given: PRIVTD_LEDGER, else this name next to the state file.
LEDGER_NAME = "privtd-ledger.json"


def own_mechanism(campaign: Mapping[str, Any]) -> Mechanism:
    """The mechanism the device perturbs with, built from the campaign's natural parameters:
    every figure the client checks comes from it, never from the figures the server states."""
    m = campaign["mechanism"]
    return MECHANISMS[m["name"]](**m["params"])


def least_release(campaign: Mapping[str, Any]) -> int:
    """The fewest answers one submission releases: one, or the whole row (P3's mechanisms)."""
    return int(campaign["n_tasks"]) if campaign.get("whole_row") else 1


def most_release(campaign: Mapping[str, Any]) -> int:
    """The most answers one submission releases: every task (at most :data:`MAX_REPORTS`), or
    the whole row (P3's mechanisms)."""
    n = int(campaign["n_tasks"])
    return n if campaign.get("whole_row") else min(n, MAX_REPORTS)


def largest_release(mech: Mechanism, ceiling: float, k: int) -> int:
    """The largest ``j <= k`` whose per-answer figure ``answer_epsilon(j)`` is within
    ``ceiling`` (0 if none); it grows with ``j`` where answers share a draw."""
    return largest_within(lambda j: mech.answer_epsilon(j) <= ceiling * (1 + 1e-9), k)


def largest_within(within: Callable[[int], bool], k: int) -> int:
    """The largest ``j <= k`` for which ``within(j)`` holds (0 if none), ``within`` holding
    for every ``j`` below one that it holds for."""
    # Doubling, then halving: the figures of large releases, the costly ones, are computed
    # only near the answer.
    lo, hi = 0, 1
    while hi < k and within(hi):
        lo, hi = hi, min(2 * hi, k)
    if hi == k and within(k):
        return k
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if within(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def per_answer_words(unit: str, k: int, whose: str = "the worker's") -> str:
    """The unit of ``answer_epsilon(k)``, in words."""
    if k <= 1:
        return f"per {unit}"
    return f"per {unit}, given {whose} other {k - 1} {unit}s of the same draw"


def _number(text: str) -> float | None:
    """``text`` as the number it spells (``"1"``, ``" 2.50 "``, ``"1e3"``), else None."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _spells(answer: Any, label: Any) -> bool:
    """Whether ``answer`` is ``label`` written another way, without loss: the text of a
    number (``"1"``, ``"1.0"`` for the label ``1``), a whole float for an integer label
    (``1.0`` for ``1``), a number for the text label that spells it (``0`` for ``"0"``), or
    ``true``/``false`` for a boolean label."""
    if isinstance(label, bool) or isinstance(answer, bool):
        words = {True: ("true", "1"), False: ("false", "0")}
        if isinstance(label, bool) and isinstance(answer, str):
            return answer.strip().lower() in words[label]
        if isinstance(answer, bool) and isinstance(label, str):
            return label.strip().lower() in words[answer]
        return answer == label and not isinstance(answer, str) and not isinstance(label, str)
    if isinstance(label, (int, float)):
        if isinstance(answer, str):
            return _number(answer) == label
        return isinstance(answer, (int, float)) and answer == label
    if isinstance(label, str) and isinstance(answer, (int, float)):
        return _number(label) == answer
    return False


def declared_answers(
    campaign: Mapping[str, Any], answers: Mapping[str, Any], *, clip: bool = True
) -> tuple[dict[str, Any], int]:
    """``answers`` ({task: answer}) as the campaign declares them, and how many were clipped.

    A categorical campaign's answer becomes the campaign's own label when it is that label
    written another way without loss (a CSV's ``"1"`` or ``1.0`` for the label ``1``, ``0``
    for ``"0"``: :func:`_spells`); anything else is a ValidationError naming the task. A
    numeric campaign's answer is read as a number (text included) and, with ``clip``, clipped
    into the campaign's range ``[low, high]`` here, before perturbing, as ``privtd perturb
    --clip`` does; without ``clip`` an answer outside it is an error.
    """
    m = campaign["mechanism"]
    out: dict[str, Any] = {}
    labels = campaign.get("labels")
    if MECHANISMS[m["name"]].kind == "categorical":
        domain = list(labels or [])
        for task, answer in answers.items():
            answer = _plain(answer)
            # One worker's own answers over a handful of labels: a plain scan.
            same = [x for x in domain if type(x) is type(answer) and x == answer]
            matches = same or [x for x in domain if _spells(answer, x)]
            if len(matches) != 1:
                raise ValidationError(
                    f"The answer {answer!r} to task {task!r} is not one of the campaign's "
                    f"labels {domain}, nor one of them written another way; fix it."
                )
            out[task] = matches[0]
        return out, 0
    params = m["params"]
    low, high = float(params.get("low", -math.inf)), float(params.get("high", math.inf))
    clipped = 0
    for task, answer in answers.items():
        answer = _plain(answer)
        value = _number(answer) if isinstance(answer, str) else answer
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValidationError(
                f"The answer {answer!r} to task {task!r} is not a finite number; campaign "
                f"{campaign.get('name', '')!r} takes numbers in [{low:g}, {high:g}]."
            )
        if clip and not low <= value <= high:
            value = min(max(value, low), high)
            clipped += 1
        out[task] = value
    return out, clipped


class Ceiling:
    """The worker's own limits and what it has spent, over all its campaigns, in a JSON file.

    Parameters
    ----------
    path : path-like
        The file (made with the defaults if missing). Keep one per person: every state file
        that names it adds to the same lifetime total.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        # Resolved once: a relative path must name the same file from any working folder,
        # and a symlink its target (saving replaces the file, which would cut a link).
        self.path = Path(path).expanduser().resolve()
        self.refresh()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file's lock for the block, so that what the block reads of the file and
        what it records there are one step for every thread and process sharing it: two
        campaigns checked at once cannot both pass a lifetime total that only one of them
        fits, and two records at once cannot drop one another's. Re-entered freely by the
        thread holding it, through any Ceiling of the same file."""
        with _FileLock.of(self.path):
            yield

    def refresh(self) -> None:
        """Read the file again: another process (or Worker) sharing it may have spent since."""
        try:
            try:
                data = json.loads(self.path.read_text())
            except FileNotFoundError:
                data = {}
            per_answer = float(data.get("max_epsilon_per_answer", DEFAULT_MAX_EPSILON_PER_ANSWER))
            lifetime = float(data.get("max_lifetime_epsilon", DEFAULT_MAX_LIFETIME_EPSILON))
            if not 0 <= lifetime < math.inf:
                raise ValueError(f"the lifetime ceiling must be a finite number >= 0: {lifetime}")
            spent = {str(k): float(v) for k, v in data.get("spent", {}).items()}
        except (ValueError, TypeError, AttributeError, OSError) as exc:
            raise ValidationError(
                f"Cannot read the worker's ceiling file {self.path} ({exc}); fix or remove it "
                "(removing it resets the lifetime total to 0)."
            ) from None
        self.per_answer, self.lifetime, self.spent = per_answer, lifetime, spent

    @classmethod
    def for_state(
        cls, state: str | os.PathLike[str], ledger: str | os.PathLike[str] | None = None
    ) -> Ceiling:
        """The ceiling a worker's state file uses: ``ledger``, else PRIVTD_LEDGER, else
        :data:`LEDGER_NAME` in the state file's folder."""
        if ledger is None:
            ledger = os.environ.get("PRIVTD_LEDGER") or Path(state).parent / LEDGER_NAME
        return cls(ledger)

    def set(self, *, per_answer: float | None = None, lifetime: float | None = None) -> None:
        """Change the limits (the worker's choice) and save."""
        for name, value in (("per-answer", per_answer), ("lifetime", lifetime)):
            if value is not None and not (
                isinstance(value, int | float) and 0 < value < float("inf")
            ):
                raise ValidationError(
                    f"The {name} ceiling must be a positive number; got {value!r}."
                )
        with self.locked():
            self.refresh()
            if per_answer is not None:
                self.per_answer = float(per_answer)
            if lifetime is not None:
                self.lifetime = float(lifetime)
            self.save()

    @property
    def total(self) -> float:
        """Epsilon spent (or about to be sent) over every campaign."""
        return float(sum(self.spent.values()))

    def check_campaign(self, campaign: Mapping[str, Any], k: int | None = None) -> float:
        """The epsilon per answer, given the worker's other ``k - 1`` answers of the same draw,
        of releasing ``k`` of the campaign's answers in one submission (None: the fewest one
        submission releases, :func:`least_release`); CeilingExceededError if it is not a
        finite number within the per-answer ceiling."""
        self.refresh()
        m = campaign["mechanism"]
        try:
            k = least_release(campaign) if k is None else int(k)
            # The figure the device's own parameters mean, not the one the server states
            # next to them (that one can only make the check stricter).
            own = float(own_mechanism(campaign).answer_epsilon(k))
            eps = max(float(m["epsilon"]), own)
        except (KeyError, TypeError, ValueError, PrivtdError) as exc:
            raise CeilingExceededError(
                f"Cannot tell this campaign's epsilon ({exc}); refusing it."
            ) from None
        if eps <= self.per_answer * (1 + 1e-9):  # NaN refused too; 1e-9: float rounding
            return eps
        unit = m.get("unit", "answer")
        name = campaign.get("name", "")
        splittable = k > 1 and not campaign.get("whole_row")
        fits = largest_release(own_mechanism(campaign), self.per_answer, k) if splittable else 0
        if 0 < fits < k:
            raise CeilingExceededError(
                f"Refused here: sending these {k} answers of campaign {name!r} in one "
                f"submission (one private draw) means epsilon {eps:.4g} "
                f"{per_answer_words(unit, k, 'your')}, above your ceiling of "
                f"{self.per_answer:g} ({self.path}); nothing was perturbed or sent. Send at most "
                f"{fits} per submission (each submission draws afresh), or raise the ceiling "
                "(Ceiling.set(per_answer=X)) only if you accept that.",
                param="per_answer",
            )
        raise CeilingExceededError(
            f"Refused here: campaign {name!r} perturbs with epsilon {eps:.4g} "
            f"{per_answer_words(unit, k, 'your')}, above your ceiling of {self.per_answer:g} "
            f"({self.path}); nothing was sent. Raise it (Ceiling.set(per_answer=X)) only if "
            "you accept that.",
            param="per_answer",
        )

    def account(self, key: str) -> Accountant:
        """The lifetime ceiling as an :class:`~privtd.mechanisms.Accountant` of what every
        campaign but ``key`` has spent: campaign ``key`` may spend up to its ``remaining``."""
        return Accountant(self.lifetime, spent_epsilon=self.total - self.spent.get(key, 0.0))

    def check_spend(self, key: str, campaign_total: float) -> None:
        """CeilingExceededError if spending up to ``campaign_total`` in campaign ``key`` would
        take the lifetime total past the ceiling."""
        self.refresh()
        account = self.account(key)
        if not account.allows(campaign_total):
            total, _ = account.after(campaign_total)
            raise CeilingExceededError(
                f"Refused here: this would take your lifetime total over all campaigns to "
                f"epsilon {total:.6g}, past your ceiling of {self.lifetime:g} ({self.path}); "
                "nothing was sent."
            )

    def record(self, key: str, campaign_total: float) -> None:
        with self.locked():
            self.refresh()  # what others recorded since stays counted
            self.spent[key] = max(self.spent.get(key, 0.0), float(campaign_total))
            self.save()

    def save(self) -> None:
        atomic_write_text(
            self.path,
            json.dumps(
                {
                    "max_epsilon_per_answer": self.per_answer,
                    "max_lifetime_epsilon": self.lifetime,
                    "spent": self.spent,
                },
                indent=1,
            ),
            private=True,  # what this person has spent, as before: 0600
        )


class _FileLock:
    """One ledger's lock: a ``threading.RLock`` between this process's threads, then an
    exclusive lock of a sidecar file (``NAME.lock``: saving replaces the ledger itself) between
    processes, taken by the outermost holder only, so the holder may re-enter it."""

    _registry: dict[Path, _FileLock] = {}
    _registry_lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + ".lock")
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd = -1

    @classmethod
    def of(cls, path: Path) -> _FileLock:
        with cls._registry_lock:
            return cls._registry.setdefault(path, cls(path))

    def __enter__(self) -> None:
        self.thread_lock.acquire()
        try:
            if self.depth == 0:
                self.fd = self._open()
                try:
                    _lock(self.fd)
                except BaseException:
                    os.close(self.fd)
                    raise
            self.depth += 1
        except BaseException:
            self.thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.depth -= 1
            if self.depth == 0:
                try:
                    _unlock(self.fd)
                finally:
                    os.close(self.fd)
        finally:
            self.thread_lock.release()

    def _open(self) -> int:
        # O_NOFOLLOW: a link planted at the lock's name is refused, not followed.
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            return os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise ValidationError(
                f"Cannot lock the worker's ceiling file ({exc.strerror}: {self.path}); make "
                "its folder writable and remove anything else at that name, or point "
                "PRIVTD_LEDGER at a file in a folder of your own."
            ) from None


def _lock(fd: int) -> None:
    """Wait for the exclusive lock of an open file (POSIX ``flock``; Windows ``msvcrt``, whose
    blocking form gives up after 10 s, so it is polled)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                return
            except OSError:
                time.sleep(0.05)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _unlock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _http() -> Any:
    try:
        import httpx
    except ImportError:  # pragma: no cover - the extra is missing
        raise ImportError("The client needs httpx: pip install 'privtd[service]'.") from None
    return httpx


class Worker:
    """One enrolled worker of one campaign; its state lives in the JSON file ``state``."""

    def __init__(
        self,
        state: str | os.PathLike[str],
        *,
        retries: int = 5,
        timeout: float = 30.0,
        ledger: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(state)
        try:
            self.state: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            raise ValidationError(
                f"No worker state at {self.path}; enrol first (privtd client enrol)."
            ) from None
        self.retries = retries
        self.timeout = timeout
        self._campaign: dict[str, Any] | None = None
        self.ceiling = Ceiling.for_state(self.path, ledger or self.state.get("ledger"))
        #: Set by :meth:`enrol` and :meth:`recover` only, never written to the state file: a
        #: code kept beside the token would be lost (or stolen) with it.
        self.recovery_code: str | None = None

    # ---------------------------------------------------------------- enrolment
    @staticmethod
    def preview(
        url: str,
        campaign_id: str,
        state: str | os.PathLike[str],
        ledger: str | os.PathLike[str] | None = None,
    ) -> tuple[dict[str, Any], Ceiling]:
        """The campaign's public parameters and the worker's ceiling, read before enrolling
        (a GET that identifies no one); CeilingExceededError if the campaign is above it."""
        campaign = _request("GET", f"{url.rstrip('/')}/campaigns/{campaign_id}", None, None)
        ceiling = Ceiling.for_state(state, ledger)
        ceiling.check_campaign(campaign)
        return dict(campaign), ceiling

    @classmethod
    def enrol(
        cls,
        url: str,
        campaign_id: str,
        name: str,
        state: str | os.PathLike[str],
        *,
        code: str | None = None,
        ledger: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Worker:
        """Enrol ``name`` with the requester's enrolment ``code`` (None: an open campaign).
        The campaign's epsilon is checked against the worker's ceiling first: above it,
        CeilingExceededError and nothing is sent."""
        path = Path(state)
        if path.exists():
            raise ValidationError(f"{path} already holds a worker's state; pick another file.")
        campaign, ceiling = cls.preview(url, campaign_id, path, ledger)
        sent: dict[str, Any] = {"name": name}
        if code is not None:
            sent["code"] = code
        body = _request("POST", f"{url.rstrip('/')}/campaigns/{campaign_id}/workers", None, sent)
        atomic_write_text(
            path,
            json.dumps(
                {
                    "url": url.rstrip("/"),
                    "campaign_id": campaign_id,
                    "name": name,
                    "worker_id": body["worker_id"],
                    "token": body["token"],
                    "budget": campaign["budget"],
                    "spent_epsilon": 0.0,
                    "pending": None,
                    "ledger": str(ceiling.path),
                },
                indent=1,
            ),
            private=True,  # it holds the worker's token
        )
        worker = cls(path, ledger=ceiling.path, **kwargs)
        worker.recovery_code = body.get("recovery_code")
        return worker

    @classmethod
    def recover(
        cls,
        url: str,
        campaign_id: str,
        code: str,
        state: str | os.PathLike[str],
        *,
        ledger: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Worker:
        """The worker whose state file was lost, from the recovery ``code`` shown at enrolment:
        a new state file with a fresh token of the same worker and what it has spent, which
        carries over (the server's count, and the ledger's if that is higher). The code works
        once: the new one is in the returned worker's ``recovery_code``."""
        path = Path(state)
        if path.exists():
            raise ValidationError(f"{path} already holds a worker's state; pick another file.")
        base = url.rstrip("/")
        campaign = _request("GET", f"{base}/campaigns/{campaign_id}", None, None)
        # The new token and next code are made here, so a retry (the answer lost) sends the
        # same request and reads the same outcome: the code sent works once.
        token, following = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        sent = {"code": code, "token": token, "next_code": following}
        body = _request("POST", f"{base}/campaigns/{campaign_id}/recovery", None, sent)
        ceiling = Ceiling.for_state(path, ledger)
        key = f"{base} {campaign_id} {body['worker_id']}"
        # What this worker spent counts as spent whichever copy remembers more: the server's,
        # or this ledger's (a release the server refused still left the device).
        spent = max(float(body["spent_epsilon"]), float(ceiling.spent.get(key, 0.0)))
        atomic_write_text(
            path,
            json.dumps(
                {
                    "url": base,
                    "campaign_id": campaign_id,
                    "name": body["name"],
                    "worker_id": body["worker_id"],
                    "token": token,
                    "budget": campaign["budget"],
                    "spent_epsilon": spent,
                    "answered": int(body["n_reports"]),
                    "pending": None,
                    "ledger": str(ceiling.path),
                },
                indent=1,
            ),
            private=True,
        )
        ceiling.record(key, spent)
        worker = cls(path, ledger=ceiling.path, **kwargs)
        worker.recovery_code = following
        return worker

    def new_recovery_code(self) -> str:
        """A new recovery code for this worker (shown once; its previous code stops working):
        for a worker enrolled before recovery codes existed, or whose code may have leaked."""
        self.recovery_code = str(self._call("POST", "/recovery-code", None)["recovery_code"])
        return self.recovery_code

    # ---------------------------------------------------------------- reading
    def campaign(self) -> dict[str, Any]:
        """The campaign's public parameters (fetched once per object)."""
        if self._campaign is None:
            self._campaign = self._call("GET", "", None)
        return self._campaign

    def tasks(self) -> list[dict[str, str]]:
        return list(self._call("GET", "/tasks", None))

    def mechanism(self) -> Mechanism:
        m = self.campaign()["mechanism"]
        return MECHANISMS[m["name"]](**m["params"])

    @property
    def epsilon(self) -> float:
        """The campaign's epsilon per answer for the fewest answers one submission releases
        (one, or the whole row), checked against the worker's ceiling."""
        return self.ceiling.check_campaign(self.campaign())

    def figures(self, n: int) -> tuple[float, float]:
        """(epsilon per answer given the worker's other ``n - 1`` answers of the draw, epsilon
        of all ``n`` together) of one submission of ``n`` answers, computed here from the
        parameters the device perturbs with."""
        mech = self.mechanism()
        return float(mech.answer_epsilon(n)), float(mech.release_epsilon(n))

    @property
    def _ledger_key(self) -> str:
        return f"{self.state['url']} {self.state['campaign_id']} {self.state['worker_id']}"

    @property
    def remaining(self) -> float:
        return float(self.state["budget"]) - float(self.state["spent_epsilon"])

    # ---------------------------------------------------------------- sending
    def submit(self, answers: Mapping[str, Any], *, clip: bool = True) -> dict[str, Any]:
        """Perturb ``answers`` ({task key: answer}) here and send them. Raises
        BudgetExceededError, before perturbing, if they would take the worker past its budget;
        first finishes a submission an earlier call left unacknowledged.

        Each answer is first taken as the campaign declares it (:func:`declared_answers`): a
        label written another way without loss (``"1"`` or ``1.0`` for the label ``1``)
        becomes the campaign's label; a numeric answer outside the campaign's range is clipped
        into it (unless ``clip=False``, which makes it an error). The result's ``n_clipped``
        says how many were clipped."""
        if self.state.get("pending"):
            self.resend()
        if not answers:
            raise ValidationError("No answers to send.")
        campaign = self.campaign()
        answers, n_clipped = declared_answers(campaign, answers, clip=clip)
        mech = self.mechanism()
        # The task list is read once: the row the ceiling is checked for is the row perturbed.
        row = [t["key"] for t in self.tasks()] if campaign["whole_row"] else []
        n = len(row) if campaign["whole_row"] else len(answers)
        cap, sent = campaign.get("max_answers_per_worker"), int(self.state.get("answered", 0))
        if cap is not None and not campaign["whole_row"] and sent + n > cap:
            # Refused here, before perturbing: the server would refuse it after the release.
            raise ValidationError(
                f"Refused here: campaign {campaign.get('name', '')!r} takes at most {cap} "
                f"answers per worker and this worker sent {sent}; send at most "
                f"{max(cap - sent, 0)} more, not {n}. Nothing was perturbed or sent."
            )
        # The worker's own ceiling, before anything is perturbed, for these n answers under one
        # draw (figures recomputed from the parameters the device will use): per answer given
        # the others, then the lifetime total with the whole release's cost.
        # Under the ledger's lock from the read of the limits and of what was spent to the
        # record of this release: another thread or process sharing the ledger (another
        # campaign, or this state file run twice) waits, then sees this spend.
        with self.ceiling.locked():
            self.ceiling.check_campaign(campaign, n)
            # The ledger's figure for this campaign counts too: a state file restored from an
            # older copy must not make the earlier releases free again.
            self.ceiling.refresh()
            start = max(
                float(self.state["spent_epsilon"]), self.ceiling.spent.get(self._ledger_key, 0.0)
            )
            budget = Budget(float(self.state["budget"]), spent_epsilon=start)
            cost, _ = budget.cost(mech, n)
            campaign_total, _ = budget.after(cost)
            self.ceiling.check_spend(self._ledger_key, campaign_total)
            keys = [str(k) for k in answers]
            if campaign["whole_row"]:
                # P3's mechanisms release the whole row over the public task list, NULLs included.
                values = mech.perturb_worker(
                    {str(k): v for k, v in answers.items()}, tasks=row, budget=budget
                )
                keys = row
            else:
                values = mech.perturb_worker(
                    list(answers.values()), labels=campaign["labels"], budget=budget
                )
            body = {
                "mechanism": {
                    "name": campaign["mechanism"]["name"],
                    "params": campaign["mechanism"]["params"],
                },
                "reports": [
                    {"task": k, "value": _plain(v)} for k, v in zip(keys, values, strict=True)
                ],
            }
            # Counted in the lifetime total first (if the state's save then fails, the total
            # overcounts, never under): from here the body may reach the server.
            self.ceiling.record(self._ledger_key, budget.spent_epsilon)
            # Written before sending: from here on only this body goes out under this key.
            self.state["pending"] = {
                "key": str(uuid.uuid4()),
                "body": body,
                "epsilon": budget.spent_epsilon,
                "cost": budget.spent_epsilon - start,
            }
            self._save()
        return {**self.resend(), "n_clipped": n_clipped}

    def resend(self) -> dict[str, Any]:
        """Send (again) the unacknowledged submission in the state file, same key, same body.

        If the server refuses it for good (a 4xx other than a transient conflict: a task
        already reported, past the server's budget, unknown task...), the release still
        happened, since the server received the perturbed values: its epsilon stays spent, the
        submission moves to the state's ``refused`` list and is never sent again (a fresh
        perturbation of the same answers would spend the budget twice), and the error is
        raised. The next :meth:`submit` goes on from there.
        """
        pending = self.state.get("pending")
        if not pending:
            raise ValidationError("Nothing is waiting to be sent.")
        try:
            out = self._call(
                "POST", "/submissions", pending["body"], headers={"Idempotency-Key": pending["key"]}
            )
        except (ServiceError, BudgetExceededError) as exc:
            if isinstance(exc, ServiceError) and (exc.transient or not 400 <= exc.status < 500):
                raise  # may succeed later: kept pending, resent unchanged
            raise self._refused(pending, exc) from None
        self.state["spent_epsilon"] = max(float(pending["epsilon"]), float(out["spent_epsilon"]))
        # The server's figure may be the larger (releases this device's state forgot).
        self.ceiling.record(self._ledger_key, self.state["spent_epsilon"])
        self.state["answered"] = int(self.state.get("answered", 0)) + int(out["n_reports"])
        self.state["pending"] = None
        self._save()
        return dict(out)

    def _refused(self, pending: dict[str, Any], exc: PrivtdError) -> PrivtdError:
        """Record a refused release as spent and no longer pending; the error to raise."""
        spent = max(float(self.state["spent_epsilon"]), float(pending["epsilon"]))
        cost = float(pending.get("cost", spent - float(self.state["spent_epsilon"])))
        detail = exc.detail if isinstance(exc, ServiceError) else str(exc)
        self.state["spent_epsilon"] = spent
        self.ceiling.record(self._ledger_key, spent)  # as submit did, should that have failed
        self.state.setdefault("refused", []).append(
            {
                "key": pending["key"],
                "tasks": [r["task"] for r in pending["body"]["reports"]],
                "epsilon": cost,
                "detail": detail,
            }
        )
        self.state["pending"] = None
        self._save()
        note = (
            f"; the perturbed release (epsilon {cost:g}) reached the server, so it counts as "
            f"spent (epsilon {spent:g} of {float(self.state['budget']):g}) and is never sent "
            "again; the next submission goes on"
        )
        if isinstance(exc, ServiceError):
            return ServiceError(exc.status, exc.detail + note, param=exc.param)
        return BudgetExceededError(str(exc) + note)

    # ---------------------------------------------------------------- plumbing
    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.state, indent=1), private=True)

    def _call(
        self, method: str, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> Any:
        url = f"{self.state['url']}/campaigns/{self.state['campaign_id']}{path}"
        return _request(
            method,
            url,
            self.state["token"],
            body,
            headers,
            retries=self.retries,
            timeout=self.timeout,
        )


class Requester:
    """The requester's side: campaigns, aggregation runs and their results (the requester token
    the server printed at its first start)."""

    def __init__(self, url: str, token: str, *, retries: int = 5, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.retries = retries
        self.timeout = timeout

    def create_campaign(
        self,
        name: str,
        tasks: list[str] | list[dict[str, str]],
        mechanism: str,
        *,
        budget: float,
        epsilon: float | None = None,
        params: Mapping[str, Any] | None = None,
        labels: list[Any] | None = None,
        method: str | None = None,
        open_enrolment: bool = False,
        max_workers: int | None = None,
        max_answers_per_worker: int | None = None,
        workers_raise_ceiling: bool = False,
        adaptive: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new campaign over ``tasks`` (keys, or {"key", "text"} dicts); its description.
        Workers enrol with codes from :meth:`issue_codes`; ``open_enrolment`` lets anyone enrol
        (fake workers included: the description's ``warning`` says so). The server refuses a
        campaign in which one worker can spend more than the workers' default lifetime ceiling
        (:data:`DEFAULT_MAX_LIFETIME_EPSILON`), unless ``max_answers_per_worker`` caps what each
        answers or ``workers_raise_ceiling`` says they will raise theirs. ``adaptive``: adaptive
        redundancy's settings (``target``, ``max_per_task``, ``min_per_task``, ``batch``,
        ``max_answers``; docs/service.md), so that each worker is handed the least settled
        tasks only."""
        body = {
            "name": name,
            "tasks": [t if isinstance(t, dict) else {"key": str(t)} for t in tasks],
            "mechanism": mechanism,
            "epsilon": epsilon,
            "params": dict(params or {}),
            "labels": labels,
            "budget": budget,
            "method": method,
            "open_enrolment": open_enrolment,
            "max_workers": max_workers,
        }
        # Sent only when used: a server from before these options refuses unknown fields.
        if max_answers_per_worker is not None:
            body["max_answers_per_worker"] = max_answers_per_worker
        if workers_raise_ceiling:
            body["workers_raise_ceiling"] = True
        if adaptive is not None:
            body["adaptive"] = dict(adaptive)
        # Not retried: a create whose answer was lost would make a second campaign.
        return dict(self._call("POST", "/campaigns", body, retries=0))

    def issue_codes(
        self, campaign_id: str, count: int = 1, *, expires_in: float | None = None
    ) -> dict[str, Any]:
        """``count`` enrolment codes (each admits one worker, once), expiring after
        ``expires_in`` seconds if given: ``{"codes": [...], "expires_at": ...}``."""
        body = {"count": count, "expires_in_s": expires_in}
        # Not retried: a lost answer would leave codes no one has (harmless, but unseen).
        return dict(self._call("POST", f"/campaigns/{campaign_id}/codes", body, retries=0))

    def rotate_token(self) -> str:
        """Replace this requester's token by a new one (same campaigns) and use it from now on;
        the old token stops working. Returns the new token: keep it, it is shown once."""
        # Not retried: a lost answer would leave the old token revoked and the new one unseen.
        out = self._call("POST", "/requester/token", None, retries=0)
        self.token = str(out["token"])
        return self.token

    def revoke_token(self) -> None:
        """Revoke this requester's token. Afterwards only the server's operator can make a
        new one (``privtd requester rotate``)."""
        self._call("DELETE", "/requester/token", None)

    def campaigns(self) -> list[dict[str, Any]]:
        """This requester's campaigns, oldest first: id, name, mechanism, epsilon, budget,
        method, workers enrolled, reports received and state (docs/service.md)."""
        return list(self._call("GET", "/campaigns", None))

    def runs(self, campaign_id: str) -> list[dict[str, Any]]:
        """The campaign's aggregation runs, oldest first: status, started_at, finished_at,
        error, ..."""
        return list(self._call("GET", f"/campaigns/{campaign_id}/runs", None))

    def export_reports(self, campaign_id: str, out: Any) -> int:
        """Write the campaign's perturbed reports as CSV (task,worker,answer) to ``out``, a
        binary file object, as they arrive; returns the bytes written. Not retried once
        bytes were written (a retry would repeat them)."""
        httpx = _http()
        url = f"{self.url}/campaigns/{campaign_id}/reports"
        headers = {"Authorization": f"Bearer {self.token}"}
        written = 0
        try:
            with httpx.stream("GET", url, headers=headers, timeout=self.timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ServiceError(response.status_code, _detail(response))
                for chunk in response.iter_bytes():
                    out.write(chunk)
                    written += len(chunk)
        except httpx.TransportError as exc:
            if written:
                # The server cuts an export short when its token is revoked or replaced.
                raise ServiceError(
                    0,
                    f"the export from {url} stopped after {written} bytes, incomplete ({exc}): "
                    "the requester token was revoked or replaced, or the connection failed",
                    transient=True,
                ) from None
            raise ServiceError(0, f"cannot reach {url}: {exc}", transient=True) from None
        return written

    def start_run(self, campaign_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/campaigns/{campaign_id}/runs", None))

    def run(self, campaign_id: str, run_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/campaigns/{campaign_id}/runs/{run_id}", None))

    def results(self, campaign_id: str) -> dict[str, Any]:
        """The newest finished run's truths, confidence, worker weights and privacy report."""
        return dict(self._call("GET", f"/campaigns/{campaign_id}/results", None))

    def aggregate(
        self,
        campaign_id: str,
        *,
        poll: float = 0.25,
        progress: Any = None,
        timeout: float = 1800.0,
    ) -> dict[str, Any]:
        """Start a run, wait for it (``progress(run)`` after each poll) and return the results.

        A failed run raises ServiceError with the server's reason; a run still going after
        ``timeout`` seconds raises ServiceError naming the run, which keeps going on the
        server (read it later with :meth:`run` and :meth:`results`).
        """
        run = self.start_run(campaign_id)
        deadline = time.monotonic() + timeout
        while run["status"] not in ("done", "failed"):
            if time.monotonic() >= deadline:
                raise ServiceError(
                    0,
                    f"the aggregation run {run['run_id']} is still {run['status']} after "
                    f"{timeout:g} s (iteration {run['iteration']} of {run['max_iter']}); it goes "
                    "on on the server: read it later (Requester.run, Requester.results) or wait "
                    "longer (timeout).",
                    param="timeout",
                )
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            run = self.run(campaign_id, run["run_id"])
            if progress is not None:
                progress(run)
        if run["status"] == "failed":
            raise ServiceError(0, f"the aggregation run failed: {run['error']}")
        return self.results(campaign_id)

    def _call(self, method: str, path: str, body: Any, *, retries: int | None = None) -> Any:
        return _request(
            method,
            self.url + path,
            self.token,
            body,
            retries=self.retries if retries is None else retries,
            timeout=self.timeout,
        )


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return value


def _request(
    method: str,
    url: str,
    token: str | None,
    body: Any,
    headers: dict[str, str] | None = None,
    *,
    retries: int = 5,
    timeout: float = 30.0,
) -> Any:
    """One API call; connection failures, 5xx and a 409 with Retry-After are retried with
    backoff, 0.2 s doubling to at most 5 s between tries (safe: every write carries an
    idempotency key or is an enrolment the server refuses twice)."""
    httpx = _http()
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    delay = 0.2
    for attempt in range(retries + 1):
        try:
            response = httpx.request(method, url, json=body, headers=sent, timeout=timeout)
        except httpx.TransportError as exc:
            if attempt == retries:
                raise ServiceError(0, f"cannot reach {url}: {exc}", transient=True) from None
        else:
            # A 409 with Retry-After: a concurrent request of the same worker held the row;
            # the same request, retried, reads its outcome.
            busy = response.status_code == 409 and "retry-after" in response.headers
            if response.status_code < 500 and not busy:
                if response.status_code >= 400:
                    detail = _detail(response)
                    if response.status_code == 409 and "budget" in detail:
                        raise BudgetExceededError(detail)
                    raise ServiceError(response.status_code, detail, param=_param(response))
                # 204 (a revoked token) has no body.
                return response.json() if response.content else None
            if attempt == retries:
                raise ServiceError(response.status_code, _detail(response), transient=True)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")  # pragma: no cover


def _param(response: Any) -> str | tuple[str, ...] | None:
    """The parameter a refusal names (the service's ``param`` field), or None."""
    try:
        param = response.json().get("param")
    except (ValueError, AttributeError):
        return None
    if isinstance(param, str):
        return param
    if isinstance(param, list) and all(isinstance(p, str) for p in param):
        return tuple(param)
    return None


def _detail(response: Any) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]
