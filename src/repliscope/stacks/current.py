"""Which software stack this process runs in (recorded in every record's ``software["stack"]``).

Defined in the bottom layer, :mod:`repliscope.records.stack` (the core's provenance reads it there); handed on
here for the stacks package.
"""

from repliscope.records.stack import MARKER, current_stack, installed_lock

__all__ = ["MARKER", "current_stack", "installed_lock"]
