"""``repliscope token create|list|revoke`` and ``repliscope db upgrade`` on a temporary SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repliscope.cli.main import app
from repliscope.store import RunStore
from repliscope.store.accounts import authenticate
from repliscope.store.migrate import head


def test_token_create_list_revoke(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runner = CliRunner()
    out = runner.invoke(app, ["token", "create", "--role", "runner", "--name", "ci-bot", "--db", url])
    assert out.exit_code == 0, out.output
    token = out.output.strip().splitlines()[-1]
    assert token.startswith("rs_") and "token 1 (runner, ci-bot); shown once" in out.output
    with RunStore(url) as store:
        principal = authenticate(store, token)
    assert principal is not None and (principal.token_id, principal.name, principal.role) == (1, "ci-bot", "runner")
    listed = runner.invoke(app, ["token", "list", "--db", url])
    assert listed.exit_code == 0 and "ci-bot" in listed.output and "runner" in listed.output
    assert token not in listed.output and token[3:12] not in listed.output
    as_json = json.loads(runner.invoke(app, ["token", "list", "--db", url, "--json"]).output)
    assert [(t["id"], t["name"], t["role"], t["revoked_at"]) for t in as_json] == [(1, "ci-bot", "runner", None)]
    revoked = runner.invoke(app, ["token", "revoke", "1", "--db", url])
    assert revoked.exit_code == 0 and "token 1 (runner, ci-bot) revoked" in revoked.output
    with RunStore(url) as store:
        assert authenticate(store, token) is None
    bad = runner.invoke(app, ["token", "create", "--role", "root", "--db", url])
    assert bad.exit_code == 2 and "role 'root' is not a role (allowed: viewer, runner, admin)" in bad.output
    missing = runner.invoke(app, ["token", "revoke", "7", "--db", url])
    assert missing.exit_code == 2 and "token 7 does not exist" in missing.output


def test_db_upgrade_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    out = CliRunner().invoke(app, ["db", "upgrade", "--db", url, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"database": url, "from": None, "to": head(), "legacy": False, "added": []}
