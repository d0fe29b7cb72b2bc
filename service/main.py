"""``uvicorn service.main:app``: the API configured from the environment (PREFLIGHT_*)."""

from service.api.app import create_app

app = create_app()
