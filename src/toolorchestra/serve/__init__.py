"""`toolorchestra serve`: a pool's models and its orchestrator behind an OpenAI-compatible HTTP endpoint.

This package owns the wire format (`protocol`: request validation, responses, stream chunks, error
bodies), the served models (`models`: pass-through pool models, orchestrator episodes, the concurrency
bound), the episodes kept for retrieval (`trajectories`), the FastAPI app (`app`) and running it under
uvicorn (`server`). FastAPI and uvicorn are imported only by `app` and `server`, never by this file, so
importing the package or the CLI stays cheap.
"""
