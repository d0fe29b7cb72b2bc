"""One router per resource: candidates, studies, health (incl. schema and metrics)."""
