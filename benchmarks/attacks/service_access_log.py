"""Secrets a client put in the URL, against the service's access log.

    python benchmarks/attacks/service_access_log.py

Runs the API in-process (FastAPI's test client) with the access log captured, and sends
requests that carry a secret where a client might put one by mistake or an attacker might
want one logged: in a path under ``/static`` or ``/static-offline-docs`` with a file
extension, as a bare query key (``/collect?SECRET``, 24 and 43 characters) or a key with a
value, as an id in a path, and as the values of ``token`` and ``code``. Each secret is a fresh
random string of the length given. Prints how many of the secrets appear in the log, and which.

Before the fix, the path and query were kept when they looked safe (a file name
under a static folder; a query key of up to 24 characters), so 4 of 8 secrets were written to
the log; now paths are logged as route templates with only UUIDs filled in, static files only
if the server ships them, and query keys only if the service's pages read them: 0 of 8.
tests/test_service_listing.py runs :func:`probe`.
"""

from __future__ import annotations

import json
import logging
import secrets
import tempfile
from typing import Any

TOKEN = "log-requester-token-of-32-characters"


def probe() -> dict[str, Any]:
    """The secrets of each probe that reach the access log."""
    from fastapi.testclient import TestClient

    from privtd.service import access_log, create_app

    def secret(n: int) -> str:
        # A letter, then random hex: shaped like a name, as a password or key often is.
        return "k" + secrets.token_hex(n)[: n - 1]

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(logging.INFO)
    logger = access_log.LOGGER
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    sent: dict[str, str] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            app = create_app(f"sqlite:///{tmp}/log.db", requester_token=TOKEN)
            with TestClient(app, raise_server_exceptions=False) as api:
                probes = {
                    "static_path_with_extension": ("/static/{}.js", 43),
                    "docs_static_path_with_extension": ("/static-offline-docs/{}.css", 43),
                    "bare_query_key_24": ("/collect?{}", 24),
                    "bare_query_key_43": ("/collect?{}", 43),
                    "query_key_with_value": ("/collect?campaign=x&{}=1", 20),
                    "id_in_path": ("/campaigns/{}/tasks", 43),
                    "token_value": ("/campaigns?token={}", 43),
                    "code_value": ("/collect?code={}", 43),
                }
                for what, (pattern, n) in probes.items():
                    sent[what] = secret(n)
                    api.get(pattern.format(sent[what]))
            app.state.engine.dispose()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = "\n".join(lines)
    leaked = sorted(what for what, s in sent.items() if s in text)
    return {"secrets": len(sent), "logged": len(leaked), "which": leaked, "lines": len(lines)}


def main() -> None:
    print(json.dumps(probe()))


if __name__ == "__main__":
    main()
