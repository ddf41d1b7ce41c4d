"""Who may talk to a repliscope cluster: every listener binds loopback unless the user names an interface, a
cluster reachable from other hosts uses Dask's TLS with mutual certificates (:class:`ClusterSecurity`, certs from
``repliscope cluster certs DIR``: :func:`make_certs`), and a plaintext (``tcp://``/``ws://``) address that is not
loopback is refused unless ``--insecure-cluster`` is given (then warned).

A Dask scheduler or worker runs any function a connected client sends it: a peer that can connect can run code
as the agent's user. Hence: loopback (this machine's users only) or mutual TLS (holders of a certificate signed by
the cluster's CA only). Every listener follows one rule (:func:`check_exposure`): plaintext only on loopback
unless ``--insecure-cluster``. Certificates carry their role (:data:`CERT_ROLES`, the subject's organizational unit
and the extended key usage) and each listener checks the role of the peer's certificate on every message
(:mod:`repliscope.agents.roles`): only a client certificate may submit work. Dask and ``cryptography`` are imported
inside functions only."""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from repliscope.errors import RepliscopeError

LOOPBACK_HOST = "127.0.0.1"
"""Where repliscope's own listeners (the embedded scheduler and agent, an agent's HTTP server) bind by default."""
PLAINTEXT = ("tcp", "ws")
ENCRYPTED = ("tls", "wss")
ALLOWED_PROTOCOLS = (*PLAINTEXT, *ENCRYPTED)
"""The schemes of a scheduler address (not ``inproc://``: a repliscope process never shares one with another)."""
CERT_DAYS = 825
"""Validity of the certificates ``cluster certs`` makes (days; the CA: ten years)."""
CERT_ROLES = ("scheduler", "agent", "client")
"""The key pairs ``cluster certs`` makes besides the CA: give each process the one of its role. The role is the
certificate's organizational unit (signed by the CA, so a holder cannot change it): only ``client`` may submit
work, ``agent`` may only register as a worker (and fetch data from another agent), ``scheduler`` may only drive
agents."""

_ADDRESS = re.compile(r"^(tcp|tls|ws|wss)://(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")


class InsecureClusterWarning(UserWarning):
    """A plaintext cluster address reachable from other hosts was used because ``--insecure-cluster`` says so."""


def split_address(address: str) -> tuple[str, str, int]:
    """``PROTOCOL://HOST:PORT`` -> (protocol, host without brackets, port); a RepliscopeError when malformed."""
    match = _ADDRESS.match(address)
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise RepliscopeError(
            f"--scheduler {address!r}: give PROTOCOL://HOST:PORT with PROTOCOL one of "
            f"{', '.join(ALLOWED_PROTOCOLS)} (tcp:// on this machine, tls:// with --tls-ca-file/--tls-cert/"
            "--tls-key across machines), e.g. tcp://127.0.0.1:8786"
        )
    return match.group(1), match.group(2).strip("[]"), int(match.group(3))


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP (127.0.0.0/8, ::1); any other name or address counts as reachable."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClusterSecurity:
    """Mutual TLS for one process of a cluster: the CA every peer's certificate must be signed by, this
    process's certificate and key (PEM files); ``insecure``: a plaintext address reachable from other hosts is
    allowed (warned). ``ca_file`` None = no TLS. ``role_dir``: a folder of :func:`make_certs` whose
    scheduler/agent/client certificates this process uses, each for its own role (the in-process cluster, which is
    all three in one process); ``cert``/``key`` are then the agent's (what agent processes it starts get)."""

    ca_file: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    insecure: bool = False
    role_dir: Path | None = None

    @property
    def tls(self) -> bool:
        return self.ca_file is not None

    @classmethod
    def from_options(
        cls, ca_file: Path | None, cert: Path | None, key: Path | None, insecure: bool = False
    ) -> ClusterSecurity:
        """From the CLI's ``--tls-ca-file --tls-cert --tls-key --insecure-cluster``: all three TLS files or none
        (a RepliscopeError naming what is missing or unreadable)."""
        given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
        if any(v is not None for v in given.values()):
            missing = [flag for flag, v in given.items() if v is None]
            if missing:
                raise RepliscopeError(
                    f"mutual TLS needs --tls-ca-file, --tls-cert and --tls-key together; "
                    f"missing {', '.join(missing)} (make them with `repliscope cluster certs DIR`)"
                )
            for flag, path in given.items():
                assert path is not None
                if not path.is_file():
                    raise RepliscopeError(f"{flag} {path}: no such file")
        return cls(ca_file, cert, key, insecure)

    @classmethod
    def of_folder(cls, folder: Path) -> ClusterSecurity:
        """Every role's own certificate from ``folder`` (written by :func:`make_certs`)."""
        return cls(folder / "ca.pem", folder / "agent.pem", folder / "agent.key", role_dir=folder)

    def flags(self) -> list[str]:
        """The CLI options that give another repliscope process (e.g. a stack's agent) this security."""
        out: list[str] = []
        if self.tls:
            out += ["--tls-ca-file", str(self.ca_file), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]
        if self.insecure:
            out.append("--insecure-cluster")
        return out

    def require_role(self, role: str, acting_as: str) -> None:
        """A RepliscopeError unless this process's certificate (TLS only) is of ``role`` (acting as ``acting_as``):
        the cluster's listeners would refuse it, said here at once and clearly."""
        if not self.tls or self.role_dir is not None:
            return
        assert self.cert is not None
        found = cert_role(self.cert)
        if found != role:
            what = f"a '{found}' certificate" if found else "a certificate without a repliscope role"
            raise RepliscopeError(
                f"--tls-cert {self.cert} is {what}; {acting_as} needs the {role} certificate ({role}.pem and "
                f"{role}.key of `repliscope cluster certs DIR`): the cluster refuses any other role"
            )

    def dask(self) -> Any:
        """A ``distributed.security.Security`` (encryption required; TLS 1.2+): this certificate for every Dask
        role, or with ``role_dir`` each Dask role its own (scheduler -> scheduler, worker -> agent, client ->
        client); None without TLS (Dask then uses its configuration, i.e. none)."""
        if not self.tls:
            return None
        import ssl

        from distributed.security import Security

        def files(role: str) -> tuple[str, str]:
            if self.role_dir is not None:
                return str(self.role_dir / f"{role}.pem"), str(self.role_dir / f"{role}.key")
            return str(self.cert), str(self.key)

        (client_cert, client_key), (worker_cert, worker_key), (scheduler_cert, scheduler_key) = (
            files("client"),
            files("agent"),
            files("scheduler"),
        )
        return Security(
            tls_ca_file=str(self.ca_file),
            tls_client_cert=client_cert,
            tls_client_key=client_key,
            tls_worker_cert=worker_cert,
            tls_worker_key=worker_key,
            tls_scheduler_cert=scheduler_cert,
            tls_scheduler_key=scheduler_key,
            require_encryption=True,
            tls_min_version=ssl.TLSVersion.TLSv1_2,
        )


def check_exposure(what: str, protocol: str, host: str, security: ClusterSecurity | None) -> None:
    """The one rule of every address a repliscope process listens on or connects to (``what``, e.g. an address or
    ``--host 0.0.0.0``): plaintext (``protocol`` tcp/ws) on a ``host`` that is not loopback is refused, unless
    ``security.insecure`` (then an :class:`InsecureClusterWarning` and a line on stderr)."""
    security = security or ClusterSecurity()
    if protocol not in PLAINTEXT or is_loopback(host):
        return
    if not security.insecure:
        raise RepliscopeError(
            f"{what}: a plaintext cluster listener or scheduler on another interface lets anyone who reaches it "
            "run code as the agent's user; use tls:// with --tls-ca-file/--tls-cert/--tls-key (`repliscope "
            "cluster certs DIR`), or accept the risk with --insecure-cluster"
        )
    message = (
        f"{what}: plaintext cluster reachable from other hosts (--insecure-cluster): anyone who can "
        "connect can run code on its agents"
    )
    warnings.warn(message, InsecureClusterWarning, stacklevel=3)
    print(f"warning: {message}", file=sys.stderr)


def check_cluster_address(address: str, security: ClusterSecurity | None) -> None:
    """Refuse (RepliscopeError) what would expose or misuse a cluster: a ``tls://`` address without the TLS
    files, TLS files with a plaintext address, a plaintext address that is not loopback (:func:`check_exposure`:
    unless ``security.insecure``, then warned)."""
    protocol, host, _port = split_address(address)
    security = security or ClusterSecurity()
    if protocol in ENCRYPTED and not security.tls:
        raise RepliscopeError(
            f"{address}: a TLS scheduler needs --tls-ca-file, --tls-cert and --tls-key "
            "(make them with `repliscope cluster certs DIR`)"
        )
    if protocol in PLAINTEXT and security.tls:
        raise RepliscopeError(
            f"{address}: --tls-* files are given but the address is plaintext {protocol}://; "
            f"use tls://{address.split('://', 1)[1]}"
        )
    check_exposure(address, protocol, host, security)


def check_listen_host(host: str, security: ClusterSecurity | None, option: str = "--host") -> None:
    """A listener on ``host``: plaintext (no TLS in ``security``) only on loopback, unless ``--insecure-cluster``
    (:func:`check_exposure`, the rule of scheduler addresses)."""
    protocol = "tls" if security is not None and security.tls else "tcp"
    check_exposure(f"{option} {host}", protocol, host, security)


def agent_listen_host(scheduler: str, host: str | None) -> str:
    """The interface an agent listens on: ``host`` when the user names one, else loopback when the scheduler is
    on this machine; a RepliscopeError for a remote scheduler without ``--host`` (the scheduler must reach it)."""
    if host:
        return host
    _protocol, scheduler_host, _port = split_address(scheduler)
    if is_loopback(scheduler_host):
        return LOOPBACK_HOST
    raise RepliscopeError(
        f"the scheduler {scheduler} is on another host: give --host, the interface of this "
        "machine it reaches the agent on (agents listen on loopback unless told)"
    )


# -- certificates ------------------------------------------------------------------------------------------------
def _name(common_name: str, role: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    unit = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role)] if role else []
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "repliscope cluster"),
            *unit,
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def cert_role(path: Path) -> str | None:
    """The role (one of :data:`CERT_ROLES`) of the PEM certificate at ``path``, None when it names none (a
    certificate not made by :func:`make_certs`, or by an older one); a RepliscopeError when unreadable."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise RepliscopeError(f"--tls-cert {path}: not a readable PEM certificate ({exc})") from exc
    units = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)]
    return units[0] if len(units) == 1 and units[0] in CERT_ROLES else None


def role_of_peercert(peercert: Any) -> str | None:
    """The role of a peer's verified certificate as ``ssl.SSLSocket.getpeercert()`` gives it (a dict), None
    when it has none or several organizational units (or no certificate at all)."""
    if not isinstance(peercert, dict):
        return None
    units = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "organizationalUnitName"]
    return units[0] if len(units) == 1 and units[0] in CERT_ROLES else None


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _write_cert(path: Path, cert: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _san(hosts: list[str]) -> Any:
    from cryptography import x509

    names: list[Any] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", "::1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_certs(
    folder: Path, hosts: list[str] | None = None, days: int = CERT_DAYS, overwrite: bool = False
) -> dict[str, Path]:
    """Write a cluster's CA (``ca.pem``, ``ca.key``) and one certificate + key per role of :data:`CERT_ROLES`
    (``scheduler.pem``/``scheduler.key``, ...), signed by the CA (EC P-256, SHA-256; the role as the subject's
    organizational unit; extended key usage server and client auth, a client's client auth only; the
    hosts ``localhost``, ``127.0.0.1``, ``::1`` and ``hosts`` as subject alternative names). Keys are written mode
    0600. Returns name -> path. A folder that already holds them is refused unless ``overwrite``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    names = ["ca.pem", "ca.key"] + [f"{role}.{ext}" for role in CERT_ROLES for ext in ("pem", "key")]
    folder.mkdir(parents=True, exist_ok=True)
    taken = [n for n in names if (folder / n).exists()]
    if taken and not overwrite:
        raise RepliscopeError(
            f"{folder} already holds {', '.join(taken)}: choose another folder or --overwrite "
            "(the cluster's processes would need the new certificates)"
        )
    now = datetime.now(UTC) - timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("repliscope cluster CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out = {"ca.pem": folder / "ca.pem", "ca.key": folder / "ca.key"}
    _write_key(out["ca.key"], ca_key)
    _write_cert(out["ca.pem"], ca)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    usage = {"scheduler": both, "agent": both, "client": [ExtendedKeyUsageOID.CLIENT_AUTH]}  # a client never listens
    for role in CERT_ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"repliscope {role}", role))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage[role]), critical=True)
            .add_extension(_san(hosts or []), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        out[f"{role}.key"] = folder / f"{role}.key"
        out[f"{role}.pem"] = folder / f"{role}.pem"
        _write_key(out[f"{role}.key"], key)
        _write_cert(out[f"{role}.pem"], cert)
    return out
