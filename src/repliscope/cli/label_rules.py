"""The words of ``--label-rule`` in the help of ``evaluate``, ``pitfalls``, ``bench`` and ``stacks``.

The datasets registry (:data:`repliscope.datasets.LABEL_RULES`) is the truth, but importing it costs ~45 ms at
every start of the command line; so the help reads this static copy, which ``tests/cli/test_label_rule_help.py``
compares with the registry (the same names): a rule added there without its word here fails
that test, never the help silently.
"""

from __future__ import annotations

LABEL_RULE_NAMES = ("imagenet_wnid", "filename_index", "subfolders", "csv", "none")
"""The names of ``LABEL_RULES`` (the registry sorts them), in the order the help shows them: the most used first."""

NEEDS_LABELS_CSV = "csv"
"""The rule that reads its labels from ``--labels-csv``: a command without that option does not offer it."""


def label_rule_choices(*, labels_csv: bool) -> str:
    """``imagenet_wnid | filename_index | ...``: every rule, without ``csv`` when the command has no
    ``--labels-csv`` (``labels_csv=False``)."""
    return " | ".join(n for n in LABEL_RULE_NAMES if labels_csv or n != NEEDS_LABELS_CSV)
