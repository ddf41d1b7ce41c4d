"""The bottom layer: the data repliscope writes down (the evaluation record's types, the stack a record was made
in, a stack matrix), importing nothing of repliscope, so every layer may read them.

``pyproject.toml``'s import contracts check that no module here imports another package of repliscope.
"""
