"""The job loop: claims jobs from the store, runs the engine in a child process, writes results.

``runner`` (one device, one job at a time), ``engine_process`` (the child), ``supervisor``
(a runner per device), ``outcome`` (how a job ended, and whether it is retried).
"""
