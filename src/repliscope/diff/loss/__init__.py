"""The loss diff: the same network outputs and targets through an original loss and a candidate's, compared
component by component, gradient by gradient and match by match (:mod:`.contract` is the interface)."""
