"""The HTTP service (``repliscope serve``): a FastAPI app over the same core the CLI calls.

Nothing here is imported by ``import repliscope`` or the CLI until ``repliscope serve`` runs; the core never
imports this package."""
