"""The conditioning engine (one module per paper's method) and the job runner."""
