"""The HTTP layer: the FastAPI app, one router per resource, typed dependencies, problem
responses, auth, middleware and metrics. Reads and writes only through ``service.store``."""
