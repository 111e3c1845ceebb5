"""Run privtd's command line in-process, as the CLI tests do."""

from privtd.cli import main


def run_cli(args, capsys):
    """``(exit code, stdout, stderr)`` of ``privtd ARGS``; arguments may be paths or numbers."""
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def offline_worker(tmp_path, monkeypatch, mechanism, labels=None, name="c"):
    """A ``privtd.client.Worker`` of a campaign served by no server: ``GET`` of the campaign
    returns its description, ``POST /submissions`` is recorded in the list returned beside
    the worker's state file (every Worker built on it in this test, the CLI's included)."""
    import json

    from privtd.client import Worker
    from privtd.mechanisms import MECHANISMS

    mech = MECHANISMS[mechanism["name"]](**mechanism["params"])
    campaign = {
        "name": name,
        "mechanism": {**mechanism, "epsilon": mech.epsilon, "unit": mech.unit},
        "labels": labels,
        "whole_row": False,
        "n_tasks": 100,
        "budget": 1000.0,
    }
    sent = []

    def call(self, method, path, body, headers=None):
        if method == "GET" and path == "":
            return campaign
        assert (method, path) == ("POST", "/submissions"), (method, path)
        sent.append(body)
        return {"n_reports": len(body["reports"]), "spent_epsilon": 0.0}

    monkeypatch.setattr(Worker, "_call", call)
    state = tmp_path / "worker.json"
    fields = {"url": "http://127.0.0.1:9", "campaign_id": "c1", "name": "ann", "worker_id": "w1"}
    fields.update(token="t", budget=1000.0, spent_epsilon=0.0, pending=None)
    ledger = tmp_path / "ledger.json"
    # A ceiling the campaign is within: the ceiling is not what these tests check.
    ledger.write_text(json.dumps({"max_epsilon_per_answer": 1e3, "max_lifetime_epsilon": 1e6}))
    state.write_text(json.dumps({**fields, "ledger": str(ledger)}))
    return state, sent
