"""Issue 20 item 1 (hostile inputs): the embedded agent listened on 0.0.0.0 (any Dask client on the network could
run code in the server); a plaintext scheduler on another host had no authentication. Now: every listener binds
loopback unless told, a remote cluster needs mutual TLS (certificates from ``repliscope cluster certs``), and a
non-loopback plaintext address is refused unless ``--insecure-cluster`` (then warned)."""

from __future__ import annotations

import ipaddress
import json
import socket
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the 'agents' extra (dask, distributed) is not installed")
pytest.importorskip("cryptography", reason="the 'agents' extra (cryptography) is not installed")

from repliscope.agents.cluster import Cluster, run_agent
from repliscope.agents.placement import constraints_for
from repliscope.agents.security import (
    ClusterSecurity,
    InsecureClusterWarning,
    agent_listen_host,
    check_cluster_address,
)
from repliscope.agents.submit import submit_job
from repliscope.errors import RepliscopeError
from repliscope.manifest.loader import load_manifest
from tests.agents.procs import Processes, free_port
from tests.test_jobs import TINY, tiny_job


def _listening(pid: int) -> list[tuple[str, int]]:
    """The (ip, port) every TCP socket of process ``pid`` listens on."""
    import psutil

    return sorted(
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    )


def test_the_embedded_cluster_listens_on_loopback_only() -> None:
    import os

    before = set(_listening(os.getpid()))
    with Cluster.connect(None) as cluster:
        opened = sorted(set(_listening(os.getpid())) - before)
        worker = cluster.worker
        assert worker is not None and worker.address.startswith("tls://127.0.0.1:")  # its own certificates
        assert cluster.address.startswith("tls://127.0.0.1:") and cluster.certs_dir is not None
        certs = cluster.certs_dir
        assert stat.S_IMODE(certs.stat().st_mode) == 0o700
        with pytest.raises(RepliscopeError, match="cannot connect"):  # a local user without its certificates
            Cluster.connect(cluster.address.replace("tls://", "tcp://"), timeout=3)
    # the scheduler, its HTTP server, the agent and the agent's HTTP server: four listeners, none on 0.0.0.0
    assert len(opened) == 4, opened
    assert all(ipaddress.ip_address(ip).is_loopback for ip, _ in opened), opened
    assert not certs.exists()  # its certificates go with it


def test_an_agent_for_a_remote_scheduler_needs_an_interface_named() -> None:
    assert agent_listen_host("tcp://127.0.0.1:8786", None) == "127.0.0.1"
    assert agent_listen_host("tls://localhost:8786", None) == "127.0.0.1"
    assert agent_listen_host("tls://10.0.0.2:8786", "10.0.0.7") == "10.0.0.7"
    with pytest.raises(RepliscopeError, match="give --host"):
        agent_listen_host("tls://10.0.0.2:8786", None)


@pytest.mark.parametrize(
    "address", ["tcp://0.0.0.0:8786", "tcp://192.0.2.1:8786", "ws://scheduler.example:8786", "tcp://[2001:db8::1]:8786"]
)
def test_a_plaintext_scheduler_on_another_host_is_refused(address: str) -> None:
    with pytest.raises(RepliscopeError, match="--insecure-cluster"):
        check_cluster_address(address, None)
    with pytest.raises(RepliscopeError, match="--insecure-cluster"):
        Cluster.connect(address, timeout=1)
    with pytest.warns(InsecureClusterWarning, match="anyone who can connect can run code"):
        check_cluster_address(address, ClusterSecurity(insecure=True))


def test_tls_addresses_and_tls_files_go_together(tmp_path: Path) -> None:
    with pytest.raises(RepliscopeError, match="needs --tls-ca-file, --tls-cert and --tls-key"):
        check_cluster_address("tls://127.0.0.1:8786", None)
    with pytest.raises(RepliscopeError, match="missing --tls-cert, --tls-key"):
        ClusterSecurity.from_options(tmp_path / "ca.pem", None, None)
    with pytest.raises(RepliscopeError, match="no such file"):
        ClusterSecurity.from_options(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_cluster_address("tcp://127.0.0.1:8786", None)  # loopback plaintext: fine, no warning


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "repliscope.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_refuses_plaintext_remote_schedulers() -> None:
    done = _cli("agents", "--scheduler", "tcp://192.0.2.1:8786")
    assert done.returncode == 2 and "--insecure-cluster" in done.stderr + done.stdout
    done = _cli("agent", "--scheduler", "tcp://192.0.2.1:8786", "--name", "x")
    assert done.returncode == 2 and "--insecure-cluster" in done.stderr + done.stdout


def test_cluster_certs_writes_a_ca_and_one_key_pair_per_role(tmp_path: Path) -> None:
    from cryptography import x509

    done = _cli("cluster", "certs", str(tmp_path / "certs"), "--host", "scheduler.internal")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert names == [
        "agent.key",
        "agent.pem",
        "ca.key",
        "ca.pem",
        "client.key",
        "client.pem",
        "scheduler.key",
        "scheduler.pem",
    ]
    for key in (tmp_path / "certs").glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((tmp_path / "certs" / "ca.pem").read_bytes())
    agent = x509.load_pem_x509_certificate((tmp_path / "certs" / "agent.pem").read_bytes())
    agent.verify_directly_issued_by(ca)
    san = agent.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "scheduler.internal" in san.get_values_for_type(x509.DNSName)
    again = _cli("cluster", "certs", str(tmp_path / "certs"))
    assert again.returncode == 2 and "already holds" in again.stderr + again.stdout


def _tls_scheduler(procs: Processes, certs: Path) -> str:
    """``repliscope cluster scheduler`` with TLS (it checks the peers' certificate roles) on a free port."""
    port = free_port()
    procs._start(
        "scheduler",
        [
            sys.executable,
            "-m",
            "repliscope.cli.main",
            "cluster",
            "scheduler",
            "--port",
            str(port),
            "--tls-ca-file",
            str(certs / "ca.pem"),
            "--tls-cert",
            str(certs / "scheduler.pem"),
            "--tls-key",
            str(certs / "scheduler.key"),
        ],
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"tls://127.0.0.1:{port}"
        except OSError:
            assert procs.procs["scheduler"].poll() is None, procs.log("scheduler")
            time.sleep(0.2)
    raise AssertionError(procs.log("scheduler"))


def _security(certs: Path, role: str) -> ClusterSecurity:
    return ClusterSecurity.from_options(certs / "ca.pem", certs / f"{role}.pem", certs / f"{role}.key")


@pytest.mark.slow  # a dask scheduler and an agent process (~50 s on 2 loaded cores)
def test_a_mutual_tls_cluster_runs_a_job_and_refuses_clients_without_a_certificate(tmp_path: Path) -> None:
    from repliscope.agents.security import make_certs

    certs, foreign = tmp_path / "certs", tmp_path / "foreign"
    make_certs(certs)
    make_certs(foreign)  # another CA: its certificates must not get in
    procs = Processes(tmp_path)
    try:
        address = _tls_scheduler(procs, certs)
        procs._start(
            "agent",
            [
                sys.executable,
                "-m",
                "repliscope.cli.main",
                "agent",
                "--scheduler",
                address,
                "--name",
                "tls-agent",
                "--tls-ca-file",
                str(certs / "ca.pem"),
                "--tls-cert",
                str(certs / "agent.pem"),
                "--tls-key",
                str(certs / "agent.key"),
            ],
        )
        with Cluster.connect(address, security=_security(certs, "client")) as cluster:
            [agent] = cluster.wait_for_agents(1, timeout=60)
            assert agent.capabilities.agent_id == "tls-agent" and agent.address.startswith("tls://127.0.0.1:")
            outcome = submit_job(cluster, tiny_job("tls-1", limit=1), constraints_for(load_manifest(TINY), "torch"))
            assert outcome.agent["agent_id"] == "tls-agent"
            assert outcome.records[0]["counts"]["evaluated"] == 1
        from repliscope.service.cluster import ClusterHandle  # what `serve --scheduler tls://... --tls-*` uses

        handle = ClusterHandle(address, security=_security(certs, "client"))
        try:
            assert [a.capabilities.agent_id for a in handle.get().agents() if a.alive] == ["tls-agent"]
        finally:
            handle.close()
        listed = _cli(
            "agents",
            "--scheduler",
            address,
            "--json",
            "--tls-ca-file",
            str(certs / "ca.pem"),
            "--tls-cert",
            str(certs / "client.pem"),
            "--tls-key",
            str(certs / "client.key"),
        )
        assert listed.returncode == 0, listed.stderr
        assert [(a["capabilities"]["agent_id"], a["alive"]) for a in json.loads(listed.stdout)] == [("tls-agent", True)]
        agent_pid = procs.procs["agent"].pid
        assert all(ipaddress.ip_address(ip).is_loopback for ip, _ in _listening(agent_pid))
        with pytest.raises(RepliscopeError, match="needs --tls-ca-file"):  # no certificate: refused by repliscope
            Cluster.connect(address, timeout=3)
        with pytest.raises(RepliscopeError, match="cannot connect"):  # a certificate of another CA: by TLS
            Cluster.connect(address, timeout=3, security=_security(foreign, "client"))
        with pytest.raises(RepliscopeError, match="cannot connect"):  # plaintext to the TLS port
            Cluster.connect(address.replace("tls://", "tcp://"), timeout=3)
        with pytest.raises(RepliscopeError, match="could not join"):  # an agent with a foreign certificate
            run_agent(address, "intruder", security=_security(foreign, "agent"), death_timeout=3)
        assert "refused" not in procs.log("scheduler")  # the job, its events and the listing: all in the roles
    finally:
        procs.stop_all()
