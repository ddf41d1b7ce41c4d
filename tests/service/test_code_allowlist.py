"""Issue 32 item 1, the service side: a server loads architecture code only from the packages its admin allowed
(``ServiceConfig.architecture_packages``, ``repliscope serve --allow-architecture-package``). A runner's manifest
naming anything else is refused at upload and at job submission, with a 422 naming the field and the allowed
packages, before any of it is imported or run."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from repliscope.errors import RepliscopeError
from tests.conftest import LITE0

YAML = {"Content-Type": "text/yaml"}
LITE0_ARCH = """  factory: efficientnet_lite_pytorch:EfficientNet.from_name
  package: efficientnet-lite-pytorch==0.1.0
"""


def with_architecture(factory: str, package: str, extra: str = "") -> str:
    text = LITE0.read_text(encoding="utf-8")
    assert text.count(LITE0_ARCH) == 1
    return text.replace(LITE0_ARCH, f"  factory: {factory}\n  package: {package}\n{extra}")


def upload(client: TestClient, text: str, headers: dict[str, str]) -> Any:
    return client.post("/api/v1/manifests", content=text.encode(), headers={**headers, **YAML})


@pytest.fixture
def app_with(service_db_url: str) -> Iterator[Callable[..., Any]]:
    """A service app on a fresh store with the given ``architecture_packages`` (first start done)."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start

    apps: list[Any] = []

    def make(packages: tuple[str, ...]) -> Any:
        app = create_app(ServiceConfig(db_url=service_db_url, architecture_packages=packages, mount_web=False))
        app.state.test_admin_token, _ = first_start(app.state.store)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


def runner_headers(app: Any) -> dict[str, str]:
    from repliscope.store.accounts import create_token

    return {"Authorization": f"Bearer {create_token(app.state.store, 'a32-runner', 'runner')}"}


def test_a_runner_cannot_upload_a_shell_command_as_a_factory(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    sentinel = tmp_path / "SENTINEL"
    text = with_architecture("os:system", "torch")
    text = text.replace("    model_name: efficientnet-lite0\n", f'    command: "touch {sentinel}"\n', 1)
    r = upload(client, text, headers_for("runner"))
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["field"], error["code"]) == ("architecture.package", "code_policy")
    assert error["message"] == (
        "'torch': this server loads architecture code only from the packages its admin allowed "
        "(allowed: efficientnet-lite-pytorch); an admin allows a package with "
        "`repliscope serve --allow-architecture-package NAME`"
    )
    assert client.get("/api/v1/manifests", headers=headers_for("viewer")).json() == []
    assert not sentinel.exists()


def test_an_allowed_package_still_cannot_name_code_outside_it(app_with: Callable[..., Any], tmp_path: Path) -> None:
    app = app_with(("torch", "Efficientnet_Lite_PyTorch"))
    assert app.state.config.architecture_packages == ("efficientnet-lite-pytorch", "torch")
    with TestClient(app) as client:
        runner = runner_headers(app)
        cases = [
            ("os:system", "torch", "architecture.factory", "module 'os' is not provided by torch"),
            ("subprocess:run", "torch>=2", "architecture.factory", "module 'subprocess' is not provided by torch"),
            (
                "torch.hub:load",
                "efficientnet-lite-pytorch==0.1.0",
                "architecture.factory",
                "module 'torch.hub' is not provided by efficientnet-lite-pytorch",
            ),
            (
                "efficientnet_lite_pytorch:EfficientNet.__init__",
                "efficientnet-lite-pytorch",
                "architecture.factory",
                "'__init__' is a private or special attribute",
            ),
            ("efficientnet_lite_pytorch:EfficientNet.from_name", "timm==1.0", "architecture.package", "allowed: "),
        ]
        for factory, package, field, message in cases:
            r = upload(client, with_architecture(factory, package), runner)
            assert r.status_code == 422, (factory, r.text)
            assert r.json()["error"]["field"] == field, (factory, r.text)
            assert message in r.json()["error"]["message"], (factory, r.text)
        local = with_architecture(
            "efficientnet_lite_pytorch:EfficientNet.from_name", "efficientnet-lite-pytorch", "  path: models\n"
        )
        r = upload(client, local, runner)
        assert r.status_code == 422 and r.json()["error"]["field"] == "architecture.path", r.text
        assert "a local architecture module folder is refused on the server" in r.json()["error"]["message"]
        assert upload(client, LITE0.read_text(encoding="utf-8"), runner).status_code == 201


def test_the_real_example_uploads_under_the_default_allowlist(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    r = upload(client, LITE0.read_text(encoding="utf-8"), headers_for("runner"))
    assert r.status_code == 201, r.text
    assert r.json()["ref"] == "efficientnet-lite0@1.0.0"


def test_a_stored_manifest_outside_the_allowlist_is_refused_at_submission(app_with: Callable[..., Any]) -> None:
    """Stored while its package was allowed, submitted after the admin narrowed the list: refused, nothing queued."""
    from repliscope.store.service_tables import list_jobs, put_manifest

    app = app_with(())
    put_manifest(app.state.store, "efficientnet-lite0", "1.0.0", LITE0.read_text(encoding="utf-8"), uploaded_by="x")
    with TestClient(app) as client:
        r = client.post(
            "/api/v1/jobs",
            json={
                "kind": "evaluate",
                "manifest": "efficientnet-lite0@1.0.0",
                "runtime": "torch",
                "dataset": "foolbox_imagenet",
            },
            headers=runner_headers(app),
        )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["field"], error["code"]) == ("body.manifest", "code_policy")
    assert error["message"].startswith("efficientnet-lite0@1.0.0: architecture.package: 'efficientnet-lite-pytorch")
    assert "(allowed: none)" in error["message"]
    assert list_jobs(app.state.store) == []


def test_no_job_option_names_code(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    for option in ("candidate", "pipeline", "factory"):
        r = client.post(
            "/api/v1/jobs",
            json={
                "kind": "diff",
                "manifest": "efficientnet-lite0@1.0.0",
                "runtime": "torch",
                "dataset": "foolbox_imagenet",
                "options": {"runtime_b": "onnxruntime", option: "os:system"},
            },
            headers=headers_for("runner"),
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == f"body.options.{option}", r.text


def test_the_allowlist_takes_distribution_names_only() -> None:
    from repliscope.service.config import ServiceConfig

    with pytest.raises(RepliscopeError, match=r"'torch>=2' is not a distribution name"):
        ServiceConfig(architecture_packages=("torch>=2",))


def test_serve_refuses_a_bad_allowlist_entry(tmp_path: Path) -> None:
    from repliscope.cli.main import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = CliRunner().invoke(
        app,
        [
            "serve",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp_path / 'x.db'}",
            "--no-default-architecture-packages",
            "--allow-architecture-package",
            "timm==1.0",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "'timm==1.0' is not a distribution name" in res.output
