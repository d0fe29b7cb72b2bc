"""The Preflight REST service: API, SQL store, job queue and the `preflight` CLI."""
