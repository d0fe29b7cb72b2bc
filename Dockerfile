# syntax=docker/dockerfile:1
# One image for every Preflight role: `preflight db upgrade`, `preflight serve`, `preflight worker`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# PyTorch first, in its own layer: the largest download and the one that changes least.
# The default wheel from PyPI carries its CUDA libraries; the host needs only the NVIDIA
# driver and the NVIDIA Container Toolkit. For a CPU-only image build with
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=""
RUN if [ -n "$TORCH_INDEX" ]; then pip install "$TORCH_SPEC" --index-url "$TORCH_INDEX"; \
    else pip install "$TORCH_SPEC"; fi

COPY pyproject.toml README.md ./
COPY nas ./nas
COPY service ./service
COPY worker ./worker
RUN pip install ".[service,worker,postgres]" && useradd --create-home --uid 10001 preflight

USER preflight
EXPOSE 8000
# Workers and the API stop gracefully on SIGTERM (a running job finishes or goes back).
STOPSIGNAL SIGTERM
CMD ["preflight", "serve", "--host", "0.0.0.0", "--port", "8000"]
