"""The torch backend: the reference framework of layer diffs and a re-implementation format (a torch port)."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "torch",
    runtimes=(
        RuntimeEntry(
            "torch",
            "repliscope.backends.torch.runner:TorchRunner",
            source_formats=("pytorch_state_dict",),
            distributions=("torch",),
            instrument="repliscope.backends.torch.tracing:instrument",
        ),
    ),
    frameworks={"torch": "torch"},
    framework_distributions={"torch": ("torch",)},
    candidates={"torch": "repliscope.backends.torch.candidate:TorchCandidate"},
)
