"""Model unit tests any test suite can call: passthrough / shape, gradients, serialization, determinism, compile.

Each ``assert_*`` helper raises :class:`AssertionError` whose message names every offender (parameter, input or
output), the size of the difference and, where it can, the likely cause and the fix. They need no pytest
(``__tracebackhide__`` only shortens pytest's tracebacks) and import torch, onnxruntime and keras lazily, so
importing this module costs nothing.

Conventions shared by the torch helpers:

* ``example_inputs`` is one tensor (the single positional argument) or a tuple of positional arguments.
* Outputs may be a tensor or any nesting of tuples, lists, dicts and namedtuples of tensors; they are named
  ``output``, ``output[0]``, ``output['logits']``, ``output.logits`` in messages.
* ``train`` selects the mode for the check (``True`` train, ``False`` eval, ``None`` leave as is). The model is
  left as it was found: module modes, buffers (e.g. batch-norm running statistics) and ``.grad`` are restored,
  and the global RNG state is not consumed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import itertools
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from repliscope.testkit._compare import compare_named, flatten_outputs, to_numpy

if TYPE_CHECKING:
    import torch

__all__ = [
    "assert_compiled_matches_eager",
    "assert_deterministic",
    "assert_gradients_flow",
    "assert_keras_roundtrip",
    "assert_onnx_roundtrip",
    "assert_output_shape",
    "assert_state_dict_roundtrip",
]

Shape = Sequence[int | None]


# --------------------------------------------------------------------------- passthrough / shape


def assert_output_shape(
    model: torch.nn.Module,
    example_inputs: Any,
    expected_shape: Shape | Sequence[Shape] | dict[str, Shape],
    *,
    check_finite: bool = True,
    train: bool | None = None,
) -> Any:
    """Passthrough test: the inputs go through ``model`` and every output has the expected shape.

    ``expected_shape`` is one shape (the output must be a single tensor), a sequence of shapes (one per output
    tensor, in the order of :func:`flatten_outputs`), or a dict from output names (``"output['logits']"``) to
    shapes. ``None`` in a shape matches any size. With ``check_finite`` every floating output must be free of
    NaN and Inf. Returns the model's output.
    """
    __tracebackhide__ = True
    torch = _torch()
    args = _as_args(example_inputs)
    with _preserved(model, train), torch.no_grad():
        output = model(*args)
    named = flatten_outputs(output)
    problems: list[str] = []
    listing = ", ".join(name for name, _ in named) or "none"
    wanted: list[tuple[str, Shape]]
    if isinstance(expected_shape, dict):
        wanted = list(expected_shape.items())
    elif _is_shape(expected_shape):
        wanted = [(named[0][0], cast(Shape, expected_shape))] if len(named) == 1 else []
        if len(named) != 1:
            problems.append(f"expected one output tensor, the model returned {len(named)}: {listing}")
    else:
        wanted = [(name, shape) for (name, _), shape in zip(named, expected_shape, strict=False)]  # type: ignore[misc]
        if len(expected_shape) != len(named):
            problems.append(
                f"{len(expected_shape)} shapes expected, the model returned {len(named)} output tensors: {listing}"
            )
    actual = dict(named)
    for name, shape in wanted:
        if name not in actual:
            problems.append(f"{name}: missing (outputs: {listing})")
            continue
        got = tuple(actual[name].shape)
        if len(got) != len(shape) or any(w is not None and w != g for w, g in zip(shape, got, strict=False)):
            problems.append(f"{name}: shape {got}, expected {_fmt_shape(shape)}")
    if check_finite:
        for name, value in named:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                bad = int((~torch.isfinite(value)).sum())
                if bad:
                    problems.append(f"{name}: {bad} of {value.numel()} values are NaN or Inf")
    _raise_if("assert_output_shape", problems)
    return output


# --------------------------------------------------------------------------- gradients


def assert_gradients_flow(
    model: torch.nn.Module,
    example_inputs: Any,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    *,
    train: bool | None = True,
    check_inputs: bool = True,
    ignore: Iterable[str] = (),
    seed: int = 0,
) -> None:
    """Gradient test: every trainable parameter and every floating input gets a finite, non-zero gradient.

    A parameter with no gradient (``None``) is not used in the forward pass or is cut off from the loss (a
    ``.detach()``, ``.data``, ``.numpy()`` or an integer cast on the way); an all-zero gradient usually means a
    dead branch (e.g. multiplied by zero, a saturated activation, a ReLU that is never positive).
    With ``check_inputs`` each floating-point tensor in ``example_inputs`` is cloned with
    ``requires_grad=True`` and checked the same way, so an input the model detaches is reported.

    ``loss_fn(output) -> scalar`` defaults to a fixed random projection ``sum(output * r)`` over every floating
    output (``r`` seeded, not all ones: a plain sum is constant under softmax or normalization and would
    make every gradient numerically zero). The forward runs under ``torch.manual_seed(seed)`` (dropout and
    stochastic depth are reproducible) and, by default, in train mode. ``ignore`` holds names or glob
    patterns of parameters (and ``"input 0"``-style inputs) allowed to get no gradient. Frozen parameters
    (``requires_grad=False``) are not checked. Every offender is listed.
    """
    __tracebackhide__ = True
    torch = _torch()
    patterns = list(ignore)
    args = list(_as_args(example_inputs))
    checked_inputs: list[tuple[str, Any]] = []
    if check_inputs:
        for i, arg in enumerate(args):
            if isinstance(arg, torch.Tensor) and (arg.is_floating_point() or arg.is_complex()):
                args[i] = arg.detach().clone().requires_grad_(True)
                checked_inputs.append((f"input {i}", args[i]))
    with _preserved(model, train), torch.random.fork_rng(devices=[]), torch.enable_grad():
        for p in model.parameters():
            p.grad = None
        torch.manual_seed(seed)
        sampling = model.training
        output = model(*args)
        loss = loss_fn(output) if loss_fn is not None else _projection_loss(output, seed)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise AssertionError(
                f"assert_gradients_flow: loss_fn must return a scalar tensor, got "
                f"{type(loss).__name__} {tuple(getattr(loss, 'shape', ()))}"
            )
        if loss.requires_grad:
            loss.reshape(()).backward()
        params = [(f"parameter '{n}'", p) for n, p in model.named_parameters() if p.requires_grad]
        problems = [
            f"{label} {tuple(t.shape)}: {why}"
            for label, t in params + checked_inputs
            if not _ignored(label, patterns) and (why := _gradient_problem(torch, t.grad))
        ]
    bad_inputs = sum(p.startswith("input ") for p in problems)
    summary = (
        f"{len(problems) - bad_inputs} of {len(params)} trainable parameters and {bad_inputs} of "
        f"{len(checked_inputs)} floating inputs got no usable gradient"
    )
    if problems and not loss.requires_grad:
        problems.insert(
            0,
            "the loss does not require grad at all: every output is detached from the "
            "parameters and inputs (a torch.no_grad()/inference_mode block or .detach() in forward?)",
        )
    hint = "If a tensor is meant to get no gradient, freeze it (requires_grad_(False)) or pass ignore=['name or glob']."
    if sampling and any("exactly zero" in p for p in problems):
        hint += (
            " In train mode, dropout or stochastic depth can zero a whole branch for every sample of a small "
            "batch (EfficientNet's drop_connect does at batch 2 for some seeds): if train=False or another "
            f"seed (now {seed}) passes, the branch is connected."
        )
    _raise_if("assert_gradients_flow", problems, summary=summary, hint=hint)


def _gradient_problem(torch: Any, grad: torch.Tensor | None) -> str:
    if grad is None:
        return "no gradient (not used in the forward pass, or detached from the loss)"
    finite = torch.isfinite(grad)
    if not bool(finite.all()):
        return f"{int((~finite).sum())} of {grad.numel()} gradient entries are NaN or Inf"
    if not bool(grad.any()):
        return "gradient is exactly zero everywhere (dead branch?)"
    return ""


def _projection_loss(output: Any, seed: int) -> torch.Tensor:
    torch = _torch()
    leaves = [
        t
        for _, t in flatten_outputs(output)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    ]
    if not leaves:
        raise AssertionError("assert_gradients_flow: the model returned no floating-point tensor; pass loss_fn")
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros((), device=leaves[0].device)
    for leaf in leaves:
        weight = torch.randn(tuple(leaf.shape), generator=generator).to(device=leaf.device, dtype=leaf.dtype)
        total = total + (leaf * weight).real.sum().float()
    return total


# --------------------------------------------------------------------------- serialization


def assert_state_dict_roundtrip(
    model: torch.nn.Module,
    example_inputs: Any,
    factory: Callable[[], torch.nn.Module],
    *,
    train: bool | None = False,
    seed: int = 0,
) -> None:
    """Serialization test: ``state_dict`` → bytes → ``torch.load(weights_only=True)`` → a fresh ``factory()``
    model loaded strictly gives bit-identical outputs.

    Fails on missing / unexpected keys and shape mismatches (all listed), on a state_dict that only loads by
    unpickling arbitrary objects, and on any output difference. When outputs differ, buffers that are not in
    the state_dict (``register_buffer(..., persistent=False)`` or plain tensor attributes set in ``__init__``)
    and that differ between the two models are named: they are the usual cause. Both forwards run under
    ``torch.manual_seed(seed)`` in eval mode by default (``train``).
    """
    __tracebackhide__ = True
    torch = _torch()
    args = _as_args(example_inputs)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    try:
        state = torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise AssertionError(
            f"assert_state_dict_roundtrip: the state_dict does not load with weights_only=True "
            f"(it holds objects other than tensors and plain containers): {exc}"
        ) from exc
    fresh = factory()
    result = fresh.load_state_dict(state, strict=False)
    problems = [f"missing key '{k}' (in the fresh model, not in the saved state_dict)" for k in result.missing_keys]
    problems += [f"unexpected key '{k}' (saved, but the fresh model has no such entry)" for k in result.unexpected_keys]
    if problems:
        _raise_if(
            "assert_state_dict_roundtrip",
            problems,
            hint="Does factory() build the same architecture (same config) as the model under test?",
        )
    anchor = next(itertools.chain(model.parameters(), model.buffers()), None)
    if anchor is not None:
        fresh.to(anchor.device)
    _copy_modes(model, fresh)
    with _preserved(model, train), _preserved(fresh, train), torch.no_grad():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            expected = model(*args)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            actual = fresh(*args)
    problems = compare_named(
        flatten_outputs(expected),
        flatten_outputs(actual),
        exact=True,
        expected_label="the original",
        actual_label="the reloaded model",
    )
    if problems:
        saved = set(state)
        fresh_buffers = dict(fresh.named_buffers())
        for name, value in model.named_buffers():
            other = fresh_buffers.get(name)
            if name not in saved and (other is None or other.shape != value.shape or not torch.equal(other, value)):
                problems.append(
                    f"buffer '{name}' is not in the state_dict (persistent=False) and differs "
                    "in the fresh model: likely cause"
                )
    _raise_if(
        "assert_state_dict_roundtrip",
        problems,
        hint="Everything forward() reads must be a parameter or a persistent buffer, or be rebuilt "
        "identically by the constructor.",
    )


def assert_onnx_roundtrip(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    opset: int = 18,
    dynamo: bool = True,
    train: bool | None = False,
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Serialization test: ``torch.onnx.export`` then onnxruntime (CPU) gives the torch outputs within tolerance.

    The export uses ``dynamo=True`` (torch.export + onnxscript) by default, ``dynamo=False`` for the legacy
    TorchScript exporter. Tensor arguments become the ONNX inputs in order; non-tensor arguments are baked in.
    The file goes to a temporary directory, or to ``path`` to keep it. A failed export is a test failure.
    """
    __tracebackhide__ = True
    torch = _torch()
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError("assert_onnx_roundtrip needs onnxruntime: pip install 'repliscope[onnx]'") from exc
    args = _as_args(example_inputs)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    with contextlib.ExitStack() as stack:
        if path is None:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "model.onnx"
        else:
            target = Path(path)
        with _preserved(model, train), torch.no_grad():
            expected = model(*args)
            try:
                with _quiet_torch():
                    if dynamo:
                        torch.onnx.export(
                            model,
                            args,
                            str(target),
                            dynamo=True,
                            opset_version=opset,
                            external_data=False,
                            optimize=True,
                            verbose=False,
                        )
                    else:
                        torch.onnx.export(model, args, str(target), dynamo=False, opset_version=opset)
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise AssertionError(
                    f"assert_onnx_roundtrip: torch.onnx.export(dynamo={dynamo}, opset={opset}) "
                    f"failed: {type(exc).__name__}: {first}"
                ) from exc
        session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
        feeds = session.get_inputs()
        if len(feeds) != len(tensors):
            raise AssertionError(
                f"assert_onnx_roundtrip: the ONNX graph has {len(feeds)} inputs "
                f"({', '.join(f.name for f in feeds)}) but {len(tensors)} tensors were given; "
                "an input the graph dropped is unused by the model"
            )
        outputs = session.run(None, {f.name: to_numpy(t) for f, t in zip(feeds, tensors, strict=True)})
    expected_named = [(n, v) for n, v in flatten_outputs(expected) if isinstance(v, torch.Tensor)]
    actual_named = [(meta.name, value) for meta, value in zip(session.get_outputs(), outputs, strict=True)]
    problems = compare_named(
        expected_named, actual_named, atol=atol, rtol=rtol, expected_label="torch", actual_label="onnxruntime"
    )
    _raise_if(
        "assert_onnx_roundtrip",
        problems,
        hint="Find the first diverging layer with `repliscope diff MANIFEST --runtimes torch onnxruntime --layers`.",
    )


def assert_keras_roundtrip(
    keras_model: Any,
    example_inputs: Any,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    custom_objects: dict[str, Any] | None = None,
) -> None:
    """Serialization test for Keras 3: ``model.save("x.keras")`` then ``keras.saving.load_model`` gives the same
    weights (by path, all listed) and the same outputs (``model(example_inputs, training=False)``).

    This exercises ``get_config`` / ``from_config`` of every custom layer: a layer that cannot be rebuilt fails
    with the Keras error. Keras is imported lazily; ``KERAS_BACKEND`` defaults to ``tensorflow`` when unset
    (it cannot change once keras is imported). ``example_inputs`` is passed as the single call argument (a list
    for multi-input functional models). Default tolerance 0: the reloaded model runs the same graph.
    """
    __tracebackhide__ = True
    keras = _keras()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # keras-internal NumPy 2 __array__ notices
        problems = _keras_roundtrip_problems(keras, keras_model, example_inputs, atol, rtol, custom_objects)
    _raise_if("assert_keras_roundtrip", problems)


def _keras_roundtrip_problems(
    keras: Any, keras_model: Any, example_inputs: Any, atol: float, rtol: float, custom_objects: dict[str, Any] | None
) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "model.keras"
        try:
            keras_model.save(target)
            loaded = keras.saving.load_model(target, custom_objects=custom_objects)
        except Exception as exc:
            raise AssertionError(
                f"assert_keras_roundtrip: save/load failed: {type(exc).__name__}: {exc}. Custom "
                "layers need get_config() and @keras.saving.register_keras_serializable() "
                "(or custom_objects=...)"
            ) from exc
    problems = []
    before, after = keras_model.weights, loaded.weights
    if len(before) != len(after):
        problems.append(f"{len(before)} weights before saving, {len(after)} after loading")
    for w_before, w_after in zip(before, after, strict=False):
        a, b = keras.ops.convert_to_numpy(w_before), keras.ops.convert_to_numpy(w_after)
        if a.shape != b.shape or not (a == b).all():
            problems.append(f"weight '{w_before.path}' differs after loading (as '{w_after.path}')")
    expected = keras_model(example_inputs, training=False)
    actual = loaded(example_inputs, training=False)
    as_np = [(n, keras.ops.convert_to_numpy(v)) for n, v in flatten_outputs(expected)]
    problems += compare_named(
        as_np,
        [(n, keras.ops.convert_to_numpy(v)) for n, v in flatten_outputs(actual)],
        atol=atol,
        rtol=rtol,
        expected_label="the original",
        actual_label="the reloaded model",
    )
    return problems


# --------------------------------------------------------------------------- determinism and compilation


def assert_deterministic(
    model: torch.nn.Module,
    example_inputs: Any,
    runs: int = 2,
    *,
    seed: int | None = None,
    train: bool | None = None,
    deterministic_algorithms: bool = True,
) -> None:
    """Determinism test: ``runs`` forward passes on the same inputs give bit-identical outputs.

    ``torch.use_deterministic_algorithms(True)`` (and cuDNN's deterministic, non-benchmark mode) are set for
    the duration and restored; an op without a deterministic implementation fails the test. With
    ``seed=None`` (default) the RNG is NOT reset between runs, so train-mode dropout or any other sampling in
    ``forward`` is reported; pass a ``seed`` to check that a seeded run is reproducible instead.
    """
    __tracebackhide__ = True
    torch = _torch()
    if runs < 2:
        raise ValueError(f"runs must be >= 2, got {runs}")
    args = _as_args(example_inputs)
    results = []
    with (
        _preserved(model, train),
        _deterministic(torch, deterministic_algorithms),
        torch.no_grad(),
        torch.random.fork_rng(devices=[]),
    ):
        for _ in range(runs):
            if seed is not None:
                torch.manual_seed(seed)
            try:
                results.append(flatten_outputs(model(*args)))
            except RuntimeError as exc:
                if "deterministic" not in str(exc):
                    raise
                raise AssertionError(f"assert_deterministic: an op has no deterministic implementation: {exc}") from exc
        stochastic = [
            f"'{name or type(model).__name__}' ({type(m).__name__})"
            for name, m in model.named_modules()
            if m.training and "dropout" in type(m).__name__.lower()
        ]
    problems = []
    for run, named in enumerate(results[1:], start=2):
        problems += [
            f"run {run} vs run 1: {line}"
            for line in compare_named(results[0], named, exact=True, expected_label="run 1", actual_label=f"run {run}")
        ]
    hint = None
    if stochastic:
        hint = (
            f"Modules in training mode that sample: {', '.join(stochastic)}; call model.eval(), pass "
            "train=False, or pass seed=... to check seeded reproducibility."
        )
    _raise_if("assert_deterministic", problems, hint=hint)


def assert_compiled_matches_eager(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    backend: str | Callable[..., Any] = "inductor",
    fullgraph: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
    train: bool | None = False,
) -> None:
    """``torch.compile(model)`` gives the eager outputs within tolerance.

    ``backend="inductor"`` (default) generates and compiles C++ on the CPU: it needs a C++ compiler and its
    first compilation takes seconds to tens of seconds (cached afterwards under /tmp/torchinductor_$USER).
    ``backend="aot_eager"`` is a fast check of tracing and decompositions (Dynamo + AOTAutograd, no code
    generation) that catches graph capture bugs but not Inductor's numerics. ``fullgraph=True`` fails on any
    graph break. Dynamo's caches are reset before and after so that an earlier compilation (or the cache
    size limit silently falling back to eager) cannot make the test vacuous.
    """
    __tracebackhide__ = True
    torch = _torch()
    args = _as_args(example_inputs)
    options: dict[str, Any] = {"backend": backend, "fullgraph": fullgraph, "dynamic": dynamic}
    if mode is not None:
        options["mode"] = mode
    torch.compiler.reset()
    try:
        with _preserved(model, train), torch.no_grad():
            expected = model(*args)
            with _quiet_torch():
                actual = torch.compile(model, **options)(*args)
    finally:
        torch.compiler.reset()
    name = repr(backend) if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
    problems = compare_named(
        flatten_outputs(expected),
        flatten_outputs(actual),
        atol=atol,
        rtol=rtol,
        expected_label="eager",
        actual_label=f"torch.compile(backend={name})",
    )
    _raise_if(f"assert_compiled_matches_eager(backend={name})", problems)


# --------------------------------------------------------------------------- internals


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError("the torch model checks need torch: pip install 'repliscope[torch]'") from exc
    return torch


def _keras() -> Any:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    try:
        import keras
    except ImportError as exc:
        raise ImportError("assert_keras_roundtrip needs keras 3 and a backend (e.g. tensorflow)") from exc
    return keras


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    return example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)


def _is_shape(value: Any) -> bool:
    return isinstance(value, Sequence) and all(d is None or isinstance(d, int) for d in value)


def _fmt_shape(shape: Shape) -> str:
    return "(" + ", ".join("*" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _ignored(label: str, patterns: list[str]) -> bool:
    name = label.removeprefix("parameter ").strip("'")
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _raise_if(check: str, problems: list[str], *, summary: str | None = None, hint: str | None = None) -> None:
    __tracebackhide__ = True
    if not problems:
        return
    lines = [f"{check} failed: {summary or f'{len(problems)} problem(s)'}:"] + [f"  - {p}" for p in problems]
    if hint:
        lines.append(hint)
    raise AssertionError("\n".join(lines))


@contextlib.contextmanager
def _preserved(model: torch.nn.Module, train: bool | None) -> Iterator[None]:
    """Set the mode (unless ``train`` is None); on exit restore every module's mode, buffer and grad."""
    torch = _torch()
    modes = [(m, m.training) for m in model.modules()]
    buffers = [
        (m, name, b, b.detach().clone())
        for m in model.modules()
        for name, b in m.named_buffers(recurse=False)
        if b is not None
    ]
    grads = [(p, p.grad) for p in model.parameters()]
    if train is not None:
        model.train(train)
    try:
        yield
    finally:
        for module, mode in modes:
            module.training = mode
        with torch.no_grad():
            for module, name, original, saved in buffers:
                setattr(module, name, original)
                original.copy_(saved)
        for param, grad in grads:
            param.grad = grad


def _copy_modes(source: torch.nn.Module, target: torch.nn.Module) -> None:
    modes = {name: m.training for name, m in source.named_modules()}
    for name, module in target.named_modules():
        module.training = modes.get(name, source.training)


@contextlib.contextmanager
def _deterministic(torch: Any, enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


def _quiet_torch() -> contextlib.AbstractContextManager[None]:
    from repliscope.runtimes.onnx_export import quiet_torch_exporter

    return quiet_torch_exporter()
