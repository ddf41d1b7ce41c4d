"""Agents on Dask distributed: capabilities an agent advertises (:mod:`.capabilities`), placement of a job by its
constraints (:mod:`.placement`), the cluster connection and the agent process (:mod:`.cluster`), submitting a job
(:mod:`.submit`). Importing this package imports neither dask nor distributed (only the functions that need them
do, when called); install them with ``pip install 'repliscope[agents]'``."""
