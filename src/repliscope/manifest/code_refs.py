"""Code a manifest, a request or a command line names (``module:attr.path``), checked before it is imported.

The one checker for every reference to importable code (``architecture.factory`` of a manifest, the torch runtime's
loader, ``validate``, the service's upload and job submission, ``diff --candidate`` / ``--pipeline``):

* **Syntax** (:func:`parse_ref`): ``module.sub:Attr.path``, identifiers only; an attribute starting with ``_``
  (``__globals__``, ``__subclasses__``, ``_private``) is refused, so the walk cannot reach interpreter internals.
* **Where the module comes from** (:func:`resolve_ref`): inside the distribution ``architecture.package`` names
  (installed, its version checked with ``packaging`` against the requirement; the module must be one of the
  top-level modules the distribution provides and its file one of the distribution's RECORDed files, so another
  package or a file shadowing it on ``sys.path`` is refused before anything is imported), or, for
  ``architecture.path``, the module file inside that local folder (:func:`import_local_module`). The standard
  library (``os``, ``subprocess``, ``builtins``) is in no distribution and is never reachable.
* **The attribute walk stays inside** (:func:`walk_attrs`): no hop may be a module (``pkg:os.system``), and every
  object on the way must be defined in a module of the same distribution / folder (its ``__module__``): a
  re-exported builtin (``eval``), ``subprocess.run`` or another package's function is refused.
* **The service's allowlist** (:func:`check_allowlisted`): a server loads architecture code only from the
  packages its admin allowed (``ServiceConfig.architecture_packages``, ``repliscope serve
  --allow-architecture-package``); checked at upload and at job submission, from metadata only (nothing imported).

Every refusal is a :class:`CodeRefError` naming the field (``architecture.factory``, ``architecture.package``,
``architecture.path``) and what is allowed.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata as md
import importlib.util
import posixpath
import re
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from repliscope.errors import FrameworkError

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
REF_PATTERN = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*:{_IDENT}(?:\.{_IDENT})*$")
"""``module.sub:Attr.path``: what ``architecture.factory`` may hold."""
EXAMPLE_REF = "efficientnet_lite_pytorch:EfficientNet.from_name"


CODE_LOADING_MODULES = (
    "torch.hub",
    "torch.serialization",
    "torch.jit",
    "torch.package",
    "torch.export",
    "torch.utils.cpp_extension",
    "torch.utils.model_zoo",
    "torch.distributed",
    "torch.multiprocessing",
    "torch._ops",
    "torch._classes",
    "torch.library",
    "tensorflow.python.saved_model",
    "keras.src.saving",
    "tf_keras.src.saving",
)
"""Modules of the frameworks that load or build code from files, strings or the network (``torch.hub.load``,
``torch.load(weights_only=False)``, ``torch.utils.cpp_extension.load_inline``, ``torch.ops.load_library``, Keras
``load_model``...): a reference into one (its module or any object's ``__module__`` on the walk) is refused even
when the manifest names that framework as ``architecture.package``."""


class CodeRefError(FrameworkError):
    """A reference to code that is refused; ``field`` is the manifest or request field it is about."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class MalformedRefError(CodeRefError):
    """The reference is not ``module:attr.path``."""


class FactoryAttributeError(FrameworkError):
    """``walked`` (``module.Attr``) has no attribute ``part``; ``close`` are the nearest public names."""

    def __init__(self, walked: str, part: str, close: list[str]) -> None:
        self.walked, self.part, self.close = walked, part, close
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(f"'{walked}' has no attribute '{part}'{hint}")


@dataclass(frozen=True)
class CodeRef:
    """A parsed ``module:attr.path``."""

    text: str
    module: str
    attrs: tuple[str, ...]

    @property
    def top(self) -> str:
        return self.module.split(".", 1)[0]


def parse_ref(text: str, *, what: str, field: str) -> CodeRef:
    """``module.sub:Attr.path`` -> :class:`CodeRef`; a malformed reference or a private / special attribute is a
    :class:`CodeRefError` at ``field``."""
    if not REF_PATTERN.match(text):
        raise MalformedRefError(f"{what} '{text}' must look like 'module:attr' (e.g. '{EXAMPLE_REF}')", field)
    module, _, attr_path = text.partition(":")
    attrs = tuple(attr_path.split("."))
    check_public(attrs, text, what, field)
    return CodeRef(text, module, attrs)


def check_public(attrs: Iterable[str], text: str, what: str, field: str) -> None:
    """Refuse an attribute starting with ``_`` (``__globals__``, ``__class__``, ``_private``)."""
    for part in attrs:
        if part.startswith("_"):
            raise CodeRefError(
                f"{what} '{text}': '{part}' is a private or special attribute; a reference names a public class "
                "or function (no attribute starting with '_')",
                field,
            )


# --- where code may come from -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributionScope:
    """An installed distribution: its top-level modules and its RECORDed files (paths relative to ``root``)."""

    name: str
    version: str
    tops: frozenset[str]
    root: Path
    files: frozenset[str]

    def describe(self) -> str:
        return f"{self.name} {self.version}"

    def modules(self) -> str:
        return ", ".join(sorted(self.tops)) or "none"

    def owns_file(self, file: str | None) -> bool:
        if not file:
            return False
        try:
            relative = Path(file).resolve().relative_to(self.root)
        except ValueError:
            return False
        return relative.as_posix() in self.files

    def owns_module(self, name: str) -> bool:
        if name.split(".", 1)[0] not in self.tops:
            return False
        loaded = sys.modules.get(name)
        file = getattr(loaded, "__file__", None) if loaded is not None else None
        return file is None or self.owns_file(file)

    def where(self) -> str:
        return f"{self.describe()} (its modules: {self.modules()})"


@dataclass(frozen=True)
class FolderScope:
    """A local folder (``architecture.path``): code whose module file is inside it."""

    root: Path

    def owns_module(self, name: str) -> bool:
        file = getattr(sys.modules.get(name), "__file__", None)
        return file is not None and Path(file).resolve().is_relative_to(self.root)

    def where(self) -> str:
        return f"architecture.path {self.root}"


Scope = DistributionScope | FolderScope


def distribution_scope(requirement: str, *, what: str, field: str) -> DistributionScope:
    """The installed distribution ``requirement`` (PEP 508, e.g. ``efficientnet-lite-pytorch==0.1.0``) names, its
    version checked against the requirement's specifier (a local label such as ``+cpu`` compared by its public
    part)."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement as exc:
        raise CodeRefError(f"{what}: not a valid requirement {requirement!r}: {exc}", field) from None
    try:
        dist = md.distribution(req.name)
    except md.PackageNotFoundError:
        raise CodeRefError(
            f"{what} needs '{requirement}', which is not installed (pip install '{requirement}')", field
        ) from None
    version = dist.version
    try:
        public = Version(version).public
    except InvalidVersion:
        raise CodeRefError(f"{what}: {req.name} has the unreadable version {version!r}", field) from None
    if not req.specifier.contains(public, prereleases=True):
        raise CodeRefError(f"{what} needs {requirement}, but {req.name} {version} is installed", field)
    return _scope_of(dist, what, field)


def inferred_scope(ref: CodeRef, *, what: str, field: str) -> DistributionScope:
    """The one installed distribution providing ``ref``'s top-level module (a caller that names no package: the
    Python API, ``diff``); the standard library and loose modules belong to none and are refused."""
    providers = sorted({canonicalize_name(d) for d in md.packages_distributions().get(ref.top, [])})
    if not providers:
        if _find_spec(ref.top) is None:
            raise CodeRefError(
                f"{what} '{ref.text}': module '{ref.module}' is not installed. Install the package that provides it "
                f"(likely: pip install {ref.top.replace('_', '-')}); the manifest's 'architecture.package' names the "
                "exact requirement",
                field,
            )
        raise CodeRefError(
            f"{what} '{ref.text}': module '{ref.top}' is not part of any installed distribution (the standard "
            "library or a loose module); a factory names code of an installed package (architecture.package) or of "
            "the manifest's own folder (architecture.path)",
            field,
        )
    if len(providers) > 1:
        raise CodeRefError(
            f"{what} '{ref.text}': module '{ref.top}' is provided by several distributions ({', '.join(providers)}); "
            "name the one meant in architecture.package",
            field,
        )
    return _scope_of(md.distribution(providers[0]), what, field)


def _scope_of(dist: md.Distribution, what: str, field: str) -> DistributionScope:
    name = dist.metadata["Name"] or "?"
    if dist.files is None:
        raise CodeRefError(
            f"{what}: {name} {dist.version} lists no files (no RECORD), so its modules cannot be checked; "
            "reinstall it with pip",
            field,
        )
    files = frozenset(posixpath.normpath(str(f)) for f in dist.files)
    canonical = canonicalize_name(name)
    tops = frozenset(
        top for top, dists in md.packages_distributions().items() if canonical in {canonicalize_name(d) for d in dists}
    )
    return DistributionScope(name, dist.version, tops, Path(str(dist.locate_file(""))).resolve(), files)


def refuse_code_loading(name: str, text: str, what: str, field: str) -> None:
    """Refuse a reference into :data:`CODE_LOADING_MODULES` (``name`` is a module name)."""
    hit = next((m for m in CODE_LOADING_MODULES if name == m or name.startswith(m + ".")), None)
    if hit is not None:
        raise CodeRefError(
            f"{what} '{text}': '{name}' is part of {hit}, which loads or compiles code from files, strings or the "
            "network; a factory builds a model from its kwargs only",
            field,
        )


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


# --- import and walk ----------------------------------------------------------------------------------------------


def import_in_distribution(ref: CodeRef, scope: DistributionScope, *, what: str, field: str) -> ModuleType:
    """Import ``ref.module`` after checking, from metadata and the import system's specs, that it is one of
    ``scope``'s modules and that every package on its path is a file of the distribution (a module of the same
    name elsewhere on ``sys.path`` or already imported from elsewhere is refused)."""
    if ref.top not in scope.tops:
        state = "is not provided by" if _find_spec(ref.top) is not None else "is not installed, and is not a module of"
        raise CodeRefError(
            f"{what} '{ref.text}': module '{ref.module}' {state} {scope.where()}; the factory must name code of "
            "the package that architecture.package names",
            field,
        )
    refuse_code_loading(ref.module, ref.text, what, field)
    parts = ref.module.split(".")
    for k in range(1, len(parts) + 1):
        name = ".".join(parts[:k])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError as exc:
            raise _not_installed(ref, what, field, exc.name or name) from None
        except Exception as exc:  # importing a parent package failed
            raise CodeRefError(
                f"{what} '{ref.text}': importing '{name}' failed: {type(exc).__name__}: {exc}", field
            ) from None
        if spec is None:
            raise _not_installed(ref, what, field, name)
        origin = spec.origin if spec.has_location else None
        if origin is None and k < len(parts):
            continue  # a namespace package on the way: its modules are checked one by one
        if not scope.owns_file(origin):
            raise CodeRefError(
                f"{what} '{ref.text}': module '{name}' would be imported from {origin or 'no file'}, which is not a "
                f"file of {scope.describe()}; refusing a module that shadows the package",
                field,
            )
    try:
        module = importlib.import_module(ref.module)
    except ModuleNotFoundError as exc:
        raise _not_installed(ref, what, field, exc.name or ref.module) from None
    except Exception as exc:  # any import-time failure of third-party code is reported
        raise CodeRefError(
            f"{what} '{ref.text}': importing '{ref.module}' failed: {type(exc).__name__}: {exc}", field
        ) from None
    if not scope.owns_file(getattr(module, "__file__", None)):
        raise CodeRefError(
            f"{what} '{ref.text}': module '{ref.module}' was imported from {getattr(module, '__file__', '?')}, "
            f"not from {scope.describe()}",
            field,
        )
    return module


def _not_installed(ref: CodeRef, what: str, field: str, missing: str) -> CodeRefError:
    pip_name = missing.split(".")[0].replace("_", "-")
    if ref.module == missing or ref.module.startswith(missing + "."):
        return CodeRefError(
            f"{what} '{ref.text}': module '{ref.module}' is not installed. Install the package that provides it "
            f"(likely: pip install {pip_name}); the manifest's 'architecture.package' names the exact requirement",
            field,
        )
    return CodeRefError(
        f"{what} '{ref.text}': importing '{ref.module}' failed because its dependency '{missing}' is not installed "
        f"(likely: pip install {pip_name})",
        field,
    )


def walk_attrs(
    start: Any, start_name: str, attrs: Iterable[str], *, scope: Scope | None, what: str, text: str, field: str
) -> tuple[Any, str]:
    """Walk ``attrs`` from ``start`` -> ``(object, "module.attr.path")``. Never through a private attribute or a
    module (``pkg:os.system``); with ``scope``, every object on the way must be defined in one of its modules
    (``__module__``); the last one must be callable. A missing attribute is a :class:`FactoryAttributeError`."""
    obj, walked = start, start_name
    parts = list(attrs)
    for i, part in enumerate(parts):
        check_public([part], text, what, field)
        if not hasattr(obj, part):
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=3)
            raise FactoryAttributeError(walked, part, close)
        obj = getattr(obj, part)
        walked = f"{walked}.{part}"
        if isinstance(obj, ModuleType):
            raise CodeRefError(
                f"{what} '{text}': '{walked}' is the module '{obj.__name__}'; a reference names a class or function "
                "defined in its module, never a module reached as an attribute (name it as 'module.sub:attr')",
                field,
            )
        owner = getattr(obj, "__module__", None)
        if scope is not None and i == len(parts) - 1 and not callable(obj) and not isinstance(owner, str):
            break  # plain data (a dict, a str) at the end: "not a callable" below
        if isinstance(owner, str):
            refuse_code_loading(owner, text, what, field)
        if scope is not None and not (isinstance(owner, str) and scope.owns_module(owner)):
            where = f"in module '{owner}'" if isinstance(owner, str) else "by the interpreter (a builtin)"
            raise CodeRefError(
                f"{what} '{text}': '{walked}' is defined {where}, outside {scope.where()}; a reference names code "
                "of that package only",
                field,
            )
    if not callable(obj):
        raise CodeRefError(f"'{walked}' is a {type(obj).__name__}, not a callable", field)
    return obj, walked


def resolve_ref(
    text: str,
    *,
    what: str = "architecture factory",
    field: str = "architecture.factory",
    package: str | None = None,
    package_field: str = "architecture.package",
    local_dir: Path | None = None,
) -> Callable[..., Any]:
    """The callable ``text`` names, imported under the rules of this module: from ``local_dir`` (a manifest's
    ``architecture.path``) when given, else from the distribution ``package`` names (version-checked; errors about
    it are at ``package_field``), else from the one installed distribution providing the module."""
    ref = parse_ref(text, what=what, field=field)
    scope: Scope
    if local_dir is not None:
        root = Path(local_dir).resolve()
        try:
            module = import_local_module(ref.module, root)
        except FrameworkError as exc:
            raise CodeRefError(str(exc), field) from None
        except Exception as exc:  # any import-time failure of the user's module is reported
            raise CodeRefError(
                f"{what} '{text}': importing '{ref.module}' failed: {type(exc).__name__}: {exc} "
                f"(architecture.path {root})",
                field,
            ) from None
        scope = FolderScope(root)
    else:
        if package is not None:
            scope = distribution_scope(package, what=f"{what} '{text}'", field=package_field)
        else:
            scope = inferred_scope(ref, what=what, field=field)
        module = import_in_distribution(ref, scope, what=what, field=field)
    obj, _ = walk_attrs(module, ref.module, ref.attrs, scope=scope, what=what, text=text, field=field)
    return obj


# --- a manifest's architecture.path: the user's own folder ---------------------------------------------------------


def import_local_module(module_name: str, folder: Path) -> ModuleType:
    """Import ``module_name`` from ``folder`` (a manifest's ``architecture.path``): the folder is on
    ``sys.path`` only during the import, and a module of that name already imported from elsewhere (or found
    elsewhere first) is an error, never silently used instead. A module of that name imported earlier in this
    process from ANOTHER manifest's ``architecture.path`` (two manifests each with their own ``model.py``,
    validated together) is unloaded first: each manifest gets its own."""
    root = Path(folder).resolve()
    for name in _parents(module_name):
        existing = sys.modules.get(name)
        if existing is not None and not _inside(existing, root) and _LOCAL.get(name) is existing:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                _LOCAL.pop(loaded, None)
                del sys.modules[loaded]
            importlib.invalidate_caches()
            existing = None
        if existing is not None and not _inside(existing, root):
            raise FrameworkError(
                f"architecture module '{module_name}': a module '{name}' is already imported from "
                f"{getattr(existing, '__file__', '?')}, not from {root}; rename the local module"
            )
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(module_name)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))
    if not _inside(module, root):
        raise FrameworkError(
            f"architecture module '{module_name}' was imported from "
            f"{getattr(module, '__file__', '?')}, not from architecture.path {root}; rename it"
        )
    for name in _parents(module_name):
        if name in sys.modules and _inside(sys.modules[name], root):
            _LOCAL[name] = sys.modules[name]
    return module


_LOCAL: dict[str, ModuleType] = {}
"""Modules imported by :func:`import_local_module` (from some manifest's architecture.path), by name."""


def _parents(module_name: str) -> list[str]:
    parts = module_name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _inside(module: ModuleType, root: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(root)


# --- the service: packages an admin allowed -------------------------------------------------------------------------


def normalize_allowlist(names: Iterable[str]) -> tuple[str, ...]:
    """Distribution names as an admin wrote them -> canonical names (PEP 503), sorted; a name that is not a valid
    project name (or carries a version or extras) is a ValueError naming it."""
    out = set()
    for name in names:
        try:
            out.add(canonicalize_name(name.strip(), validate=True))
        except InvalidName:
            raise ValueError(
                f"architecture package allowlist: {name!r} is not a distribution name (give a bare name such as "
                "efficientnet-lite-pytorch, without a version)"
            ) from None
    return tuple(sorted(out))


def check_allowlisted(
    *, factory: str, package: str | None, path: str | None, allowed: Collection[str], prefix: str = "architecture"
) -> None:
    """A server's rule for a manifest's architecture, from metadata only (nothing imported): no local module folder
    (``path``), a ``package`` whose distribution is in ``allowed`` (canonical names), a well-formed ``factory``
    and, when the package is installed here, a factory module that is one of its top-level modules. CodeRefError
    names the field and the allowed packages."""
    listed = ", ".join(allowed) or "none"
    how = "an admin allows a package with `repliscope serve --allow-architecture-package NAME`"
    if path is not None:
        raise CodeRefError(
            f"'{path}': a local architecture module folder is refused on the server, whose code it would run; "
            f"use 'package' (allowed architecture packages: {listed})",
            f"{prefix}.path",
        )
    if package is None:
        raise CodeRefError(
            f"architecture factory '{factory}' names no package; the server loads architecture code only from "
            f"the packages its admin allowed ({listed})",
            f"{prefix}.package",
        )
    try:
        name = canonicalize_name(Requirement(package).name)
    except InvalidRequirement as exc:
        raise CodeRefError(f"not a valid requirement {package!r}: {exc}", f"{prefix}.package") from None
    if name not in allowed:
        raise CodeRefError(
            f"'{package}': this server loads architecture code only from the packages its admin allowed "
            f"(allowed: {listed}); {how}",
            f"{prefix}.package",
        )
    ref = parse_ref(factory, what="architecture factory", field=f"{prefix}.factory")
    with contextlib.suppress(md.PackageNotFoundError):  # not installed here: the agent's loader checks it
        scope = _scope_of(md.distribution(name), "architecture package", f"{prefix}.package")
        if ref.top not in scope.tops:
            raise CodeRefError(
                f"architecture factory '{factory}': module '{ref.module}' is not provided by {scope.where()}; the "
                "factory must name code of the package that architecture.package names",
                f"{prefix}.factory",
            )
