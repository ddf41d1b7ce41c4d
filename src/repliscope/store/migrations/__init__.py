"""Alembic environment of the run store (``env.py`` + ``versions/``), run by :mod:`repliscope.store.migrate`.

Only ``.py`` files, so the package ships in the wheel without package-data entries.
"""
