"""The worker: the conditioning engine (``worker.engine``, the science) and the job loop
(``worker.jobs``, claims and runs jobs). Importing ``worker`` imports neither, nor torch."""
