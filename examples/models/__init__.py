"""Small example models for the layer diff: a ResNet-style CNN and a one-block vision transformer, each with a
``build(**kwargs) -> nn.Module`` factory and seeded weights written by ``make_weights.py``
(``tiny_resnet.pt``, ``tiny_transformer.pt``). Both use functional ops in ``forward`` on purpose (residual adds,
``F.relu``, matmul / softmax / scale in attention, ``F.gelu``, flatten): the golden comparison must see them."""
