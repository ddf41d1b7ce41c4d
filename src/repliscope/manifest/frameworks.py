"""Check installed distributions against the manifest's version constraints."""

from __future__ import annotations

import importlib.metadata as md

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from repliscope.backends import framework_distributions
from repliscope.errors import FrameworkError

DISTRIBUTIONS_OF_FRAMEWORK: dict[str, tuple[str, ...]] = framework_distributions()
"""The distribution(s) whose version a manifest's ``framework`` constrains; with several (TensorFlow's CPU-only
and full builds) the installed one is checked, the first listed when both are. From the backends' entries
(:mod:`repliscope.backends`)."""


def installed_version(distribution: str) -> str | None:
    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


def check_constraint(distribution: str, constraint: str, why: str) -> str:
    """Return the installed version of ``distribution`` if it satisfies ``constraint``; else FrameworkError.

    Local version labels (``2.13.0+cpu``) are compared by their public part.
    """
    version = installed_version(distribution)
    if version is None:
        raise FrameworkError(
            f"{why} needs '{distribution}{constraint}', which is not installed "
            f"(pip install '{distribution}{constraint}')"
        )
    public = Version(version).public
    if not SpecifierSet(constraint).contains(public, prereleases=True):
        raise FrameworkError(f"{why} needs {distribution}{constraint}, but {distribution} {version} is installed")
    return version


def framework_distribution(name: str) -> str:
    """The installed distribution of framework ``name`` (the first of its candidates when none is installed)."""
    candidates = DISTRIBUTIONS_OF_FRAMEWORK[name]
    return next((d for d in candidates if installed_version(d) is not None), candidates[0])


def debian_darknet_version() -> str | None:
    """The upstream version of Debian's installed ``darknet`` package (``0.0.0+git20180914.61c9d02e``), else None."""
    import shutil
    import subprocess

    if shutil.which("dpkg-query") is None:
        return None
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status} ${Version}", "darknet"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.startswith("install ok installed "):
        return None
    version = proc.stdout.rsplit(" ", 1)[1]
    return version.split(":")[-1].rsplit("-", 1)[0]


def check_darknet(constraint: str) -> str:
    """Darknet is a system package, not a Python distribution: its constraint is checked against Debian's
    ``darknet`` when installed; without it only repliscope's own .cfg/.weights reader runs (onnxruntime via
    the conversion), and the ``darknet`` runtime itself says how to install it."""
    version = debian_darknet_version()
    if version is None:
        return "not installed"
    if not SpecifierSet(constraint).contains(Version(version).public, prereleases=True):
        raise FrameworkError(
            f"the model's framework 'darknet' needs darknet{constraint}, but Debian's darknet {version} is installed"
        )
    return version


def check_framework(name: str, constraint: str) -> str:
    if name == "darknet":
        return check_darknet(constraint)
    return check_constraint(framework_distribution(name), constraint, f"the model's framework '{name}'")


def check_requirement(requirement: str, why: str) -> str:
    """``requirement`` is a PEP 508 string such as ``efficientnet-lite-pytorch==0.1.0``."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement as exc:
        raise FrameworkError(f"{why}: not a valid requirement {requirement!r}: {exc}") from exc
    return check_constraint(req.name, str(req.specifier), why)
