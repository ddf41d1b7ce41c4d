"""Issue 32 items 4 and 5 (hostile inputs): an agent listened on every interface in plaintext (``--host 0.0.0.0``
against a loopback scheduler) with no warning; any certificate of the cluster's CA, an agent's or the scheduler's,
could act as a client and submit code. Now every listener obeys the scheduler's rule (plaintext on loopback only,
unless ``--insecure-cluster``) and each certificate carries its role, checked by every listener on connect."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")
pytest.importorskip("cryptography", reason="the 'agents' extra (cryptography) is not installed")

from repliscope.agents.cluster import Cluster, run_agent, run_scheduler
from repliscope.agents.roles import allowed_ops, guard_comm, op_allowed
from repliscope.agents.security import ClusterSecurity, cert_role, make_certs
from repliscope.errors import RepliscopeError
from tests.agents.procs import Processes, free_port

CLI = [sys.executable, "-m", "repliscope.cli.main"]


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _tls(certs: Path, role: str) -> list[str]:
    ca, cert, key = str(certs / "ca.pem"), str(certs / f"{role}.pem"), str(certs / f"{role}.key")
    return ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]


def _security(certs: Path, role: str) -> ClusterSecurity:
    return ClusterSecurity.from_options(certs / "ca.pem", certs / f"{role}.pem", certs / f"{role}.key")


def _dask_security(certs: Path, role: str) -> Any:
    """What an attacker holding ``role``'s files gives Dask directly (no repliscope check on its side)."""
    from distributed.security import Security

    cert, key = str(certs / f"{role}.pem"), str(certs / f"{role}.key")
    return Security(
        tls_ca_file=str(certs / "ca.pem"),
        tls_client_cert=cert,
        tls_client_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )


# -- item 4: one listener rule ---------------------------------------------------------------------------------
def test_an_agent_listening_on_every_interface_in_plaintext_is_refused() -> None:
    with pytest.raises(RepliscopeError, match=r"--host 0\.0\.0\.0: a plaintext .*--insecure-cluster"):
        run_agent("tcp://127.0.0.1:1", "wide", host="0.0.0.0", death_timeout=1)
    done = _cli("agent", "--scheduler", "tcp://127.0.0.1:1", "--host", "0.0.0.0", "--name", "wide")
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0" in done.stderr and "--insecure-cluster" in done.stderr
    assert "agent wide at" not in done.stdout  # it never started


def test_a_plaintext_scheduler_on_every_interface_is_refused() -> None:
    with pytest.raises(RepliscopeError, match=r"--host 0\.0\.0\.0: a plaintext"):
        run_scheduler("0.0.0.0", free_port())
    done = _cli("cluster", "scheduler", "--host", "0.0.0.0", "--port", str(free_port()))
    assert done.returncode == 2 and "--insecure-cluster" in done.stderr, done.stderr


def test_insecure_cluster_lets_a_plaintext_agent_listen_widely_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import dask

    from repliscope.agents.security import InsecureClusterWarning

    # nothing listens on port 1: the agent gets past the rule (warned), then cannot join (Dask retries the refused
    # connection until its connect timeout, 30 s by default: 2 s here)
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "2s"}),
        pytest.warns(InsecureClusterWarning, match=r"--host 0\.0\.0\.0: plaintext cluster reachable"),
        pytest.raises(RepliscopeError, match="could not join"),
    ):
        run_agent("tcp://127.0.0.1:1", "wide", host="0.0.0.0", death_timeout=2, security=ClusterSecurity(insecure=True))
    assert "warning: --host 0.0.0.0: plaintext cluster reachable from other hosts" in capsys.readouterr().err


# -- inproc:// ---------------------------------------------------------------------------------------------------
def test_an_inproc_scheduler_is_a_usage_error_naming_the_allowed_schemes(tmp_path: Path) -> None:
    from tests.test_jobs import TINY

    done = _cli("evaluate", str(TINY), "--scheduler", "inproc://x", "--db", f"sqlite:///{tmp_path / 'runs.db'}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--scheduler 'inproc://x'" in done.stderr, done.stderr
    assert "the allowed schemes are tcp, ws, tls, wss" in done.stderr, done.stderr
    assert "internal error" not in done.stderr.lower()
    assert not (tmp_path / "runs.db").exists()  # refused before anything is stored
    with pytest.raises(RepliscopeError, match="the allowed schemes are tcp, ws, tls, wss"):
        run_agent("inproc://x", "x")


# -- item 5: certificates bound to roles -------------------------------------------------------------------------
def test_cluster_certs_bind_each_certificate_to_its_role(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    make_certs(tmp_path)
    assert {role: cert_role(tmp_path / f"{role}.pem") for role in ("scheduler", "agent", "client")} == {
        "scheduler": "scheduler",
        "agent": "agent",
        "client": "client",
    }
    client = x509.load_pem_x509_certificate((tmp_path / "client.pem").read_bytes())
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert usage.critical and list(usage.value) == [ExtendedKeyUsageOID.CLIENT_AUTH]  # a client never serves
    assert cert_role(tmp_path / "ca.pem") is None
    # repliscope's own commands say it at once when the role is wrong
    with pytest.raises(RepliscopeError, match=r"is a 'agent' certificate; a client of the scheduler needs the client"):
        Cluster.connect("tls://127.0.0.1:1", timeout=1, security=_security(tmp_path, "agent"))
    with pytest.raises(RepliscopeError, match=r"is a 'client' certificate; an agent needs the agent certificate"):
        run_agent("tls://127.0.0.1:1", "x", security=_security(tmp_path, "client"), death_timeout=1)


class _Comm:
    """A comm as a listener hands it over: the peer's verified certificate and the messages it sends."""

    def __init__(self, role: str | None, messages: list[Any]) -> None:
        unit = [(("organizationalUnitName", role),)] if role else []
        self.extra_info = {"peercert": {"subject": ((("organizationName", "repliscope cluster"),), *unit)}}
        self.peer_address = "tls://127.0.0.1:5"
        self.messages = messages
        self.aborted = False

    async def read(self, deserializers: Any = None) -> Any:
        return self.messages.pop(0)

    def abort(self) -> None:
        self.aborted = True


def test_an_agent_certificate_cannot_send_client_operations_on_its_worker_stream() -> None:
    from distributed.comm.core import CommClosedError

    # registered as a worker, then a graph (code) slipped into its batched stream: refused before any handler
    comm = _Comm("agent", [{"op": "register-worker"}, [{"op": "keep-alive"}, {"op": "update-graph"}]])
    assert guard_comm(comm, "scheduler")
    assert asyncio.run(comm.read()) == {"op": "register-worker"}
    with pytest.raises(CommClosedError, match="'update-graph' is not allowed for the role 'agent'"):
        asyncio.run(comm.read())
    assert comm.aborted
    for role in (None, "scheduler"):  # no role, or the scheduler's: no connection at all to the scheduler
        refused = _Comm(role, [])
        assert not guard_comm(refused, "scheduler") and refused.aborted
    assert not op_allowed("register-worker", *allowed_ops("scheduler", "client"))
    assert op_allowed("update-graph", *allowed_ops("scheduler", "client"))
    assert not op_allowed("run", *allowed_ops("worker", "agent"))  # an agent cannot run code on another
    assert op_allowed("get_data", *allowed_ops("worker", "agent"))


def _start_scheduler(procs: Processes, certs: Path) -> str:
    port = free_port()
    procs._start("scheduler", [*CLI, "cluster", "scheduler", "--port", str(port), *_tls(certs, "scheduler")])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"tls://127.0.0.1:{port}"
        except OSError:
            assert procs.procs["scheduler"].poll() is None, procs.log("scheduler")
            time.sleep(0.2)
    raise AssertionError(procs.log("scheduler"))


def _write(path: str) -> str:
    Path(path).write_text("ran")
    return path


@pytest.mark.slow  # a scheduler and an agent process (~30 s on 2 loaded cores)
def test_only_a_client_certificate_submits_work_over_real_tls(tmp_path: Path) -> None:
    from distributed import Client, Worker
    from distributed.core import rpc

    certs = tmp_path / "certs"
    make_certs(certs)
    procs = Processes(tmp_path)
    try:
        address = _start_scheduler(procs, certs)
        procs._start("agent", [*CLI, "agent", "--scheduler", address, "--name", "role-agent", *_tls(certs, "agent")])
        with Cluster.connect(address, security=_security(certs, "client")) as cluster:
            [agent] = cluster.wait_for_agents(1, timeout=60)
            assert agent.capabilities.agent_id == "role-agent"
            works = tmp_path / "client-ran"
            assert cluster.client.submit(_write, str(works), pure=False).result(timeout=60) == str(works)
            assert works.read_text() == "ran"  # a client certificate submits work

            for role in ("agent", "scheduler"):  # their certificates, given to Dask directly by an attacker
                sentinel = tmp_path / f"{role}-ran"
                with (
                    pytest.raises((OSError, TimeoutError)),
                    Client(address, security=_dask_security(certs, role), timeout="5s") as intruder,
                ):
                    intruder.submit(_write, str(sentinel), pure=False).result(timeout=10)

                async def broadcast(role: str = role, sentinel: Path = sentinel) -> Any:  # code without a Client
                    from distributed.protocol.pickle import dumps

                    args = _dask_security(certs, role).get_connection_args("client")
                    async with rpc(address, connection_args=args, timeout=5) as scheduler:
                        return await scheduler.broadcast(
                            msg={"op": "run", "function": dumps(_write), "args": dumps((str(sentinel),))}
                        )

                with pytest.raises((OSError, TimeoutError)):
                    asyncio.run(broadcast())
                assert not sentinel.exists()

            async def client_as_worker() -> None:  # a client certificate cannot become an agent
                await Worker(address, name="fake-agent", security=_dask_security(certs, "client"), death_timeout=5)

            with pytest.raises((OSError, TimeoutError, RuntimeError, ValueError)):
                asyncio.run(client_as_worker())
            assert [a.capabilities.agent_id for a in cluster.agents() if a.alive] == ["role-agent"]
            assert "fake-agent" not in {str(w.get("name")) for w in cluster.live_workers().values()}
        log = procs.log("scheduler")
        assert "its certificate's role 'agent' may not send 'register-client'" in log, log
        assert "a 'scheduler' certificate may not connect to the scheduler" in log, log
        assert "its certificate's role 'client' may not send 'register-worker'" in log, log
    finally:
        procs.stop_all()


@pytest.mark.slow  # an agent process (~15 s on 2 loaded cores)
def test_the_in_process_cluster_gives_each_role_its_own_certificate_and_its_agents_the_agent_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a ``--stack`` agent of ``evaluate``/``serve`` gets: the in-process cluster's agent certificate."""
    caplog.set_level("WARNING", logger="repliscope.agents.roles")
    with Cluster.connect(None) as cluster:
        security = cluster.security
        assert security is not None and security.cert is not None and cert_role(security.cert) == "agent"
        dask = security.dask()
        assert [cert_role(Path(dask.tls_scheduler_cert)), cert_role(Path(dask.tls_client_cert))] == [
            "scheduler",
            "client",
        ]
        procs = Processes(tmp_path)
        try:
            command = [*CLI, "agent", "--scheduler", cluster.address, "--name", "started", *security.flags()]
            procs._start("agent", command)
            alive = cluster.wait_for_agents(2, timeout=90)
            assert "started" in {a.capabilities.agent_id for a in alive}, procs.log("agent")
        finally:
            procs.stop_all()  # a clean stop: it closes its connections (allowed to an agent)
        assert "agent stopped" in procs.log("agent")
    assert not [r.getMessage() for r in caplog.records if r.name == "repliscope.agents.roles"]
