"""Training reproduced against the original: the gradient diff (:mod:`.gradients`: libdarknet's backward vs a
port's autodiff, layer by layer, at fixed weights) and the training-step diff (:mod:`.steps`: ``train_network``
vs the port's optimiser over ``k`` steps), on the Keras training port of :mod:`.keras_port` or a user's."""
