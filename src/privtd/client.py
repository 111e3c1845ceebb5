"""Clients of the collection service. A worker perturbs on its own device and sends only the
result; a requester creates campaigns and reads the aggregated results.

    from privtd.client import Requester, Worker
    requester = Requester("http://127.0.0.1:8000", token)
    campaign = requester.create_campaign("smiles", ["img-1", "img-2"], "one-layer", epsilon=1.0,
                                         labels=["smile", "no smile"], budget=10.0)
    worker = Worker.enrol("http://127.0.0.1:8000", campaign["id"], "alice", state="alice.json")
    worker.submit({"img-1": "smile", "img-2": "no smile"})
    result = requester.aggregate(campaign["id"])

The worker's state file keeps its token, what it has spent of its privacy budget, and any
submission not yet acknowledged. A submission is perturbed once and written there (with its
idempotency key) before it is sent, so a retry, even after this process died, sends the same
perturbed values under the same key: perturbing again would spend the budget twice, and the
server stores a key's reports once. A submission the server refuses for good (a 4xx) is counted
as spent all the same, since the server received it, and dropped from the state: it is never
sent again (``Worker.resend``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._files import atomic_write_text
from .errors import BudgetExceededError, PrivtdError, ValidationError
from .mechanisms import MECHANISMS, Budget
from .mechanisms._base import Mechanism


class ServiceError(PrivtdError):
    """The server refused a request (4xx) or could not be reached after the retries.

    ``transient`` is True where the same request may succeed later (no connection, a 5xx, a
    409 sent with ``Retry-After`` because a concurrent request held the row), False for a
    refusal the same request will always get.
    """

    def __init__(self, status: int, detail: str, *, transient: bool = False) -> None:
        super().__init__(f"server answered {status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail
        self.transient = transient


def _http() -> Any:
    try:
        import httpx
    except ImportError:  # pragma: no cover - the extra is missing
        raise ImportError("The client needs httpx: pip install 'privtd[service]'.") from None
    return httpx


class Worker:
    """One enrolled worker of one campaign; its state lives in the JSON file ``state``."""

    def __init__(
        self, state: str | os.PathLike[str], *, retries: int = 5, timeout: float = 30.0
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

    # ---------------------------------------------------------------- enrolment
    @classmethod
    def enrol(
        cls, url: str, campaign_id: str, name: str, state: str | os.PathLike[str], **kwargs: Any
    ) -> Worker:
        path = Path(state)
        if path.exists():
            raise ValidationError(f"{path} already holds a worker's state; pick another file.")
        body = _request(
            "POST", f"{url.rstrip('/')}/campaigns/{campaign_id}/workers", None, {"name": name}
        )
        campaign = _request("GET", f"{url.rstrip('/')}/campaigns/{campaign_id}", None, None)
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
                },
                indent=1,
            ),
        )
        return cls(path, **kwargs)

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
    def remaining(self) -> float:
        return float(self.state["budget"]) - float(self.state["spent_epsilon"])

    # ---------------------------------------------------------------- sending
    def submit(self, answers: Mapping[str, Any]) -> dict[str, Any]:
        """Perturb ``answers`` ({task key: answer}) here and send them. Raises
        BudgetExceededError, before perturbing, if they would take the worker past its budget;
        first finishes a submission an earlier call left unacknowledged."""
        if self.state.get("pending"):
            self.resend()
        if not answers:
            raise ValidationError("No answers to send.")
        campaign = self.campaign()
        mech = self.mechanism()
        budget = Budget(float(self.state["budget"]))
        budget.spent_epsilon = float(self.state["spent_epsilon"])
        keys = [str(k) for k in answers]
        if campaign["whole_row"]:
            # P3's mechanisms release the whole row over the public task list, NULLs included.
            row = [t["key"] for t in self.tasks()]
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
            "reports": [{"task": k, "value": _plain(v)} for k, v in zip(keys, values, strict=True)],
        }
        # Written before sending: from here on only this body goes out under this key.
        self.state["pending"] = {
            "key": str(uuid.uuid4()),
            "body": body,
            "epsilon": budget.spent_epsilon,
            "cost": budget.spent_epsilon - float(self.state["spent_epsilon"]),
        }
        self._save()
        return self.resend()

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
        self.state["pending"] = None
        self._save()
        return dict(out)

    def _refused(self, pending: dict[str, Any], exc: PrivtdError) -> PrivtdError:
        """Record a refused release as spent and no longer pending; the error to raise."""
        spent = max(float(self.state["spent_epsilon"]), float(pending["epsilon"]))
        cost = float(pending.get("cost", spent - float(self.state["spent_epsilon"])))
        detail = exc.detail if isinstance(exc, ServiceError) else str(exc)
        self.state["spent_epsilon"] = spent
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
            return ServiceError(exc.status, exc.detail + note)
        return BudgetExceededError(str(exc) + note)

    # ---------------------------------------------------------------- plumbing
    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.state, indent=1))

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
    ) -> dict[str, Any]:
        """A new campaign over ``tasks`` (keys, or {"key", "text"} dicts); its description."""
        body = {
            "name": name,
            "tasks": [t if isinstance(t, dict) else {"key": str(t)} for t in tasks],
            "mechanism": mechanism,
            "epsilon": epsilon,
            "params": dict(params or {}),
            "labels": labels,
            "budget": budget,
            "method": method,
        }
        # Not retried: a create whose answer was lost would make a second campaign.
        return dict(self._call("POST", "/campaigns", body, retries=0))

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
                    "longer (timeout=, privtd campaign aggregate --timeout).",
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
                    raise ServiceError(response.status_code, detail)
                # 204 (a revoked token) has no body.
                return response.json() if response.content else None
            if attempt == retries:
                raise ServiceError(response.status_code, _detail(response), transient=True)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")  # pragma: no cover


def _detail(response: Any) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]
