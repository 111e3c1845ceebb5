"""Fuzz the service's OpenAPI description with schemathesis: whatever the generated request,
the answer is never a 5xx. Requests carry the requester's token for reads and campaign creation
and a worker's token otherwise, so generated bodies reach the handlers, not only the auth
check."""

from __future__ import annotations

import tempfile

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from privtd.service import create_app  # noqa: E402

TOKEN = "fuzz-requester-token-of-32-characters"
app = create_app(
    f"sqlite:///{tempfile.mkdtemp(prefix='privtd-fuzz-')}/fuzz.db", requester_token=TOKEN
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


def _seed():
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        made = client.post(
            "/campaigns",
            headers={"Authorization": f"Bearer {TOKEN}"},
            json={
                "name": "fuzz",
                "tasks": [{"key": "t0"}, {"key": "t1"}],
                "mechanism": "one-layer",
                "epsilon": 1.0,
                "labels": ["a", "b"],
                "budget": 10.0,
            },
        ).json()
        code = client.post(
            f"/campaigns/{made['id']}/codes",
            headers={"Authorization": f"Bearer {TOKEN}"},
            json={"count": 1},
        ).json()["codes"][0]
        worker = client.post(
            f"/campaigns/{made['id']}/workers", json={"name": "w", "code": code}
        ).json()
    return made["id"], worker["token"]


CAMPAIGN, WORKER = _seed()


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    # A real campaign, so generated bodies reach the handlers (unknown campaigns: 404, tested
    # in test_service.py).
    if "campaign_id" in (case.path_parameters or {}):
        case.path_parameters["campaign_id"] = CAMPAIGN
    token = TOKEN if case.method == "GET" or case.path == "/campaigns" else WORKER
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}
    case.call_and_validate(checks=[not_a_server_error])
