"""MLModelScope's ``framework.name`` -> what repliscope runs: one row per agent, the table the importer reads.

An MLModelScope manifest's ``framework: {name, version}`` names the AGENT that ran the model and constrains that
agent's framework build: ``Onnxruntime 1.7.1`` is ONNX Runtime 1.7.1 (the Python distribution ``onnxruntime``),
not the ``onnx`` package. A repliscope manifest's ``framework`` names the model file's native framework and
constrains the distribution(s) the backends list for it (``framework: {name: onnx}`` checks ``onnx``;
:func:`repliscope.backends.framework_distributions`). So the constraint is carried over only where the two are
the same distribution (TensorFlow); otherwise ``framework.version`` is ``>=0`` and the agent's constraint becomes
the stack spec that reproduces the agent's runtime (``--runtime onnxruntime --stack 'onnxruntime==1.7.1'``),
said by the warning ``mlmodelscope.framework_runtime``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentFramework:
    """One MLModelScope agent's framework: ``title`` as people write it; ``distribution`` the PyPI distribution
    its version constraint is about (None: not a pip package, e.g. Caffe); ``framework``, ``suffix``,
    ``source_format`` and ``runtime``: the repliscope manifest framework, graph file suffix, source format and
    runtime that run its model file as the agent did (None: repliscope does not run that agent's files)."""

    title: str
    distribution: str | None
    framework: str | None = None
    suffix: str | None = None
    source_format: str | None = None
    runtime: str | None = None

    @property
    def runnable(self) -> bool:
        return self.framework is not None


AGENT_FRAMEWORKS: dict[str, AgentFramework] = {
    "onnxruntime": AgentFramework("ONNX Runtime", "onnxruntime", "onnx", ".onnx", "onnx", "onnxruntime"),
    "onnx": AgentFramework("ONNX", "onnx", "onnx", ".onnx", "onnx", "onnxruntime"),
    "tensorflow": AgentFramework("TensorFlow", "tensorflow", "tensorflow", ".pb", "tf_frozen_graph", "tensorflow"),
    "pytorch": AgentFramework("PyTorch", "torch"),
    "caffe": AgentFramework("Caffe", None),
    "caffe2": AgentFramework("Caffe2", "torch"),
    "cntk": AgentFramework("CNTK", "cntk"),
    "mxnet": AgentFramework("MXNet", "mxnet"),
    "tensorrt": AgentFramework("TensorRT", "tensorrt"),
}
"""MLModelScope ``framework.name`` (lower case) -> :class:`AgentFramework`: the agents of rai-project and c3sr
(docs/mlmodelscope-semantics.md). PyTorch agents ran TorchScript files (``.pt``), which repliscope's torch runtime
does not load (it builds a state_dict into a named architecture), so they are not runnable here."""


def agent_framework(name: str) -> AgentFramework | None:
    """The row of MLModelScope framework ``name`` (case and surrounding spaces ignored), or None."""
    return AGENT_FRAMEWORKS.get(name.strip().lower())


def carries_constraint(agent: AgentFramework) -> bool:
    """Whether the agent's version constraint applies to the distribution the repliscope framework checks."""
    from repliscope.backends import framework_distributions

    if agent.framework is None or agent.distribution is None:
        return False
    return agent.distribution in framework_distributions().get(agent.framework, ())
