-- Optuna's tables live in a database of their own, so that Preflight's schema (Alembic)
-- and Optuna's (its own migrations) never collide. Run once, when the volume is created.
CREATE DATABASE optuna OWNER preflight;
