"""Persistence: the database, its models and migrations, and every read and write the API and
the workers make (jobs, submissions, data batches, tokens). Imports no FastAPI."""
