"""Build a torch module from a weight-only file plus its architecture factory, exactly as the manifest says.

* The factory ``"module:attr.path"`` is resolved inside the distribution ``architecture.package`` names (or the
  manifest's own ``architecture.path`` folder), never elsewhere (:mod:`repliscope.manifest.code_refs`), and called
  with the manifest's kwargs; nothing else is
  called on the module afterwards (in particular never efficientnet-lite's ``set_swish()``, which silently
  replaces Lite's ReLU6 by Swish).
* Weights are read with ``torch.load(..., weights_only=True)`` (tensors and plain containers only: a file
  holding any other pickled object is refused, never executed) or from ``.safetensors`` when the
  ``safetensors`` package is installed. A checkpoint dict with a ``"state_dict"`` entry is unwrapped.
* Loading is strict: every missing key, unexpected key and shape mismatch is listed in one error.
"""

from __future__ import annotations

import pickle
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from repliscope.errors import FrameworkError
from repliscope.manifest.code_refs import FactoryAttributeError, MalformedRefError, resolve_ref
from repliscope.runtimes.base import ModelArtifact
from repliscope.runtimes.errors import ModelLoadError

_SWISH_NAMES = ("swish", "silu")


def build_torch_module(artifact: ModelArtifact, describe: dict[str, Any] | None = None) -> torch.nn.Module:
    """The module built by ``artifact.architecture``, ``artifact.path`` loaded strictly, in eval mode.

    ``describe``, if given, is filled with provenance for the evaluation record (see :func:`describe_module`
    plus ``checkpoint_key`` and ``weights_dtypes``).
    """
    arch = artifact.architecture
    if arch is None:
        raise ModelLoadError(
            f"'{artifact.path.name}' is a weight-only file (format {artifact.format}); "
            "the manifest must give 'architecture' (factory + kwargs) to build the module"
        )
    factory = resolve_factory(arch.factory, arch.module_dir, arch.package)
    try:
        module = factory(**arch.kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"architecture factory '{arch.factory}' failed with kwargs {arch.kwargs!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(
            f"architecture factory '{arch.factory}' returned {type(module).__name__}, not a torch.nn.Module"
        )
    state_dict, checkpoint_key = load_state_dict_file(artifact.path)
    apply_state_dict(module, state_dict, source=artifact.path)
    module.eval()
    info = describe_module(module)  # raises if the activations contradict the declared ones
    if describe is not None:
        describe.update(info)
        describe["checkpoint_key"] = checkpoint_key
        dtypes = {str(t.dtype).removeprefix("torch.") for t in state_dict.values()}
        describe["weights_dtypes"] = sorted(dtypes)
        if arch.module_dir is not None:
            describe["architecture_module"] = {
                "module": arch.factory.partition(":")[0],
                "folder": str(arch.module_dir),
                "sha256": arch.module_sha256,
            }
    return module


def resolve_factory(factory: str, module_dir: Path | None = None, package: str | None = None) -> Callable[..., Any]:
    """The callable ``"package.module:Attr.path"`` names, under the rules of :mod:`repliscope.manifest.code_refs`:
    imported from the local folder ``module_dir`` when given (``import_local_module``), else from inside the
    distribution the requirement ``package`` names (installed, version-checked), else from inside the one installed
    distribution providing the module; the attribute walk never leaves it (``os:system``, ``pkg:os.system`` or a
    re-exported builtin are refused, nothing of them is imported or called)."""
    try:
        return resolve_ref(factory, package=package, local_dir=module_dir)
    except FactoryAttributeError as exc:
        hint = f" Did you mean {', '.join(repr(c) for c in exc.close)}?" if exc.close else ""
        raise ModelLoadError(
            f"architecture factory '{factory}': '{exc.walked}' has no attribute '{exc.part}'.{hint}"
        ) from None
    except MalformedRefError as exc:
        raise ModelLoadError(str(exc)) from None


def load_state_dict_file(path: Path) -> tuple[dict[str, torch.Tensor], str | None]:
    """Read a weight file without executing code: ``(name -> tensor, checkpoint key unwrapped or None)``."""
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as exc:
            raise FrameworkError(
                f"'{path.name}' is a .safetensors file; install safetensors to read it (pip install safetensors)"
            ) from exc
        try:
            return dict(load_file(str(path), device="cpu")), None
        except Exception as exc:
            raise ModelLoadError(f"'{path}' is not a readable safetensors file: {exc}") from exc
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if found:
            raise ModelLoadError(
                f"refused to load '{path}': it pickles objects other than tensors and plain containers "
                f"(found {found.group(1)}), and repliscope never unpickles arbitrary code "
                "(torch.load weights_only=True). Re-save the weights with "
                "torch.save(model.state_dict(), ...) or use .safetensors"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = detail.group(1).strip() if detail else (text.strip().splitlines() or [type(exc).__name__])[0]
        raise ModelLoadError(
            f"'{path}' is not a torch weights file readable with weights_only=True "
            f"({reason}); repliscope reads only tensors and plain containers, never "
            "arbitrary pickles"
        ) from None
    except Exception as exc:
        raise ModelLoadError(
            f"'{path}' is not a torch weights file readable with weights_only=True: {type(exc).__name__}: {exc}"
        ) from None
    key = None
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj, key = obj["state_dict"], "state_dict"
    if not isinstance(obj, Mapping):
        raise ModelLoadError(
            f"'{path}' holds a {type(obj).__name__}, not a state_dict (a mapping of "
            "parameter names to tensors, or a checkpoint dict with a 'state_dict' entry)"
        )
    bad = [str(k) for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise ModelLoadError(f"'{path}': {len(bad)} state_dict entries are not name -> tensor: {_listing(bad)}")
    return dict(obj), key


def apply_state_dict(module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: Path | str) -> None:
    """``module.load_state_dict(state_dict, strict=True)``; a mismatch lists every missing key, unexpected
    key and shape mismatch (nothing is renamed or dropped to make a file fit)."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    mismatched = sorted(
        f"{k}: file {tuple(state_dict[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in set(expected) & set(state_dict)
        if state_dict[k].shape != expected[k].shape
    )
    if missing or unexpected or mismatched:
        parts = [f"the weights in '{source}' do not match the architecture:"]
        if missing:
            parts.append(f"{len(missing)} missing key(s): {_listing(missing)}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s): {_listing(unexpected)}")
            prefixes = {k.split(".", 1)[0] for k in unexpected}
            if missing and len(prefixes) == 1 and all("." in k for k in unexpected):
                parts.append(f"(all unexpected keys start with '{prefixes.pop()}.': a wrapper prefix?)")
        if mismatched:
            parts.append(f"{len(mismatched)} shape mismatch(es): {_listing(mismatched)}")
        raise ModelLoadError(parts[0] + " " + "; ".join(parts[1:]))
    try:
        module.load_state_dict(state_dict, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"loading the weights in '{source}' failed: {exc}") from exc


def describe_module(module: torch.nn.Module) -> dict[str, Any]:
    """Class, parameter count and activation modules actually present, e.g.
    ``{"activation_modules": {"ReLU6": 17}, "declared_activation": "relu6", ...}``.

    ``declared_activation`` is ``module._global_params.relu_fn`` when the module has it (efficientnet
    libraries). If the declared activation is ReLU6 but Swish/SiLU modules are present (``set_swish()``
    was called), raise: the module would silently not be the published Lite model.
    """
    counts = Counter(type(m).__name__ for m in module.modules() if _is_activation(m))
    info: dict[str, Any] = {
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "parameters": int(sum(p.numel() for p in module.parameters())),
        "activation_modules": dict(sorted(counts.items())),
    }
    declared = getattr(getattr(module, "_global_params", None), "relu_fn", None)
    if declared is not None:
        info["declared_activation"] = str(declared)
        swish = sorted(n for n in counts if any(s in n.lower() for s in _SWISH_NAMES))
        if str(declared).lower() == "relu6" and swish:
            raise ModelLoadError(
                f"the module declares relu_fn='relu6' but contains {', '.join(swish)} "
                "activations (was set_swish() called?); refusing to run a model that "
                "differs from the declared architecture"
            )
    return info


def _is_activation(m: torch.nn.Module) -> bool:
    name = type(m).__name__.lower()
    return m.__class__.__module__ == "torch.nn.modules.activation" or any(
        s in name for s in (*_SWISH_NAMES, "relu", "gelu", "mish", "sigmoid")
    )


def _listing(items: list[str]) -> str:
    return ", ".join(items)  # every offender, never truncated
