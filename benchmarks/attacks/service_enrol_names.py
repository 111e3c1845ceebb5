"""A stranger lists a campaign's enrolled worker names by probing enrolment, with no code.

    python benchmarks/attacks/service_enrol_names.py                # a fresh SQLite file
    python benchmarks/attacks/service_enrol_names.py --db postgresql://postgres@127.0.0.1:5432/DB

Runs the API in-process (FastAPI's test client) on the given database: a campaign enrols 20
workers by invitation; a stranger with no code, then one with a made-up code, sends an
enrolment for each of the 20 enrolled names and 20 names never enrolled, and guesses "enrolled"
for every answer that differs from the answer a never-enrolled name gets. Prints, for each
stranger, the enrolled names found, the false alarms and the probes per second; and, as the
limit that remains, what a worker holding one valid unused code finds the same way (a taken
name is refused with 409 without spending the code).

Before the fix, the name was checked before the code: 409 for an enrolled name, 401
(no code) or 403 (a wrong code) for the others, so each stranger found 20 of 20; now every
probe without a valid code gets the same answer, and each finds 0.
tests/test_service_attacks.py runs :func:`probe` on both databases.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from typing import Any

TOKEN = "names-requester-token-of-32-characters"
N = 20


def probe(url: str) -> dict[str, Any]:
    """The names each kind of prober finds, on a fresh app on ``url``."""
    from fastapi.testclient import TestClient

    from privtd.service import create_app

    auth = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(url, requester_token=TOKEN)
    out: dict[str, Any] = {}
    with TestClient(app) as api:
        body = {
            "name": "names",
            "tasks": [{"key": "t0"}],
            "mechanism": "one-layer",
            "epsilon": 1.0,
            "labels": ["no", "yes"],
            "budget": 10.0,
        }
        cid = api.post("/campaigns", json=body, headers=auth).json()["id"]

        def codes(n: int) -> list[str]:
            made = api.post(f"/campaigns/{cid}/codes", json={"count": n}, headers=auth)
            return list(made.json()["codes"])

        enrolled = [f"worker-{i:02d}@example.org" for i in range(N)]
        for name, code in zip(enrolled, codes(N), strict=True):
            made = api.post(f"/campaigns/{cid}/workers", json={"name": name, "code": code})
            assert made.status_code == 201, made.text
        strangers = [f"stranger-{i:02d}@example.org" for i in range(N)]

        def attack(code: str | None) -> dict[str, Any]:
            def answer(name: str) -> tuple[int, str]:
                sent: dict[str, Any] = {"name": name}
                if code is not None:
                    sent["code"] = code
                got = api.post(f"/campaigns/{cid}/workers", json=sent)
                # The detail names the name sent back: compare it with the name taken out.
                return got.status_code, got.text.replace(name, "NAME")

            started = time.perf_counter()
            seen = {name: answer(name) for name in enrolled + strangers[: N // 2]}
            rate = len(seen) / (time.perf_counter() - started)
            # The answer most never-enrolled names get is what "not enrolled" looks like.
            free = Counter(seen[n] for n in strangers[: N // 2]).most_common(1)[0][0]
            return {
                "found": sum(seen[n] != free for n in enrolled),
                "false_alarms": sum(seen[n] != free for n in strangers[: N // 2]),
                "probes_per_s": round(rate, 1),
            }

        out["no_code"] = attack(None)
        out["wrong_code"] = attack("a-made-up-code-of-43-characters-xxxxxxxxxx")
        # The limit left: an invited worker tests names with its own unused code, which a
        # taken name does not spend (it enrols, spending the code, at its first free name).
        (mine,) = codes(1)
        found = 0
        for name in enrolled:
            got = api.post(f"/campaigns/{cid}/workers", json={"name": name, "code": mine})
            found += got.status_code == 409
        out["insider_with_one_unused_code"] = {"found": found}
    app.state.engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    url = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='privtd-names-')}/names.db"
    print(json.dumps(probe(url)))


if __name__ == "__main__":
    main()
