"""Write the seeded weights of the example models beside this file: ``tiny_resnet.pt``, ``tiny_transformer.pt``.

Run:  python examples/models/make_weights.py      (deterministic: torch.manual_seed(0) before each build)

Weights are the factories' default initialisation with seed 0, except that BatchNorm running statistics and
affine parameters and the position embedding are drawn from seeded distributions too, so that no layer is an
identity and every op does real work. Saved as plain ``state_dict`` files (float32).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


def seeded(name: str) -> nn.Module:
    """The model ``name`` (``tiny_resnet`` | ``tiny_transformer``) with its seeded weights, in eval mode."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from models import tiny_resnet, tiny_transformer

    factories = {"tiny_resnet": tiny_resnet.build, "tiny_transformer": tiny_transformer.build}
    if name not in factories:
        raise ValueError(f"unknown example model '{name}' (allowed: {', '.join(factories)})")
    torch.manual_seed(0)
    model = factories[name]()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                module.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                module.bias.copy_(torch.randn(c, generator=gen) * 0.1)
            elif isinstance(module, nn.LayerNorm):
                module.weight.copy_(torch.rand(module.weight.shape, generator=gen) * 0.5 + 0.75)
                module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
        for pname, param in model.named_parameters():
            if pname == "pos":
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
    return model.eval()


def main() -> None:
    for name in ("tiny_resnet", "tiny_transformer"):
        out = HERE / f"{name}.pt"
        torch.save(seeded(name).state_dict(), out)
        print(f"{out}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
