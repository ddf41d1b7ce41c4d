"""Provisioned software stacks: a cached venv per resolved requirement set (:mod:`.store`), the stack a process
runs in (:mod:`.current`), and the matrix of one manifest run on several stacks (:mod:`.matrix`, :mod:`.run`)."""
