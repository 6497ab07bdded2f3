"""docker/docker-compose.yml hands Herald settings it can start with (no ``docker compose`` needed: the file's
``${NAME:-default}`` interpolation is applied here as compose applies it)."""

import re
from pathlib import Path

import pytest
import yaml

from herald_service.config import Settings

COMPOSE = Path(__file__).resolve().parents[1] / "docker" / "docker-compose.yml"
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def herald_environment(host: dict[str, str]) -> dict[str, str]:
    """The herald service's environment as compose builds it from the ``host`` environment: ``${NAME:-default}`` is
    the host's value when set and not empty, else the default; ``${NAME}`` is the host's value or empty."""
    environment = yaml.safe_load(COMPOSE.read_text())["services"]["herald"]["environment"]
    return {name: _VARIABLE.sub(lambda m: host.get(m[1]) or (m[2] or ""), str(value)) for name, value in environment.items()}


@pytest.mark.parametrize("host", [
    {},
    {"HERALD_API_KEYS": "key-one-abcdefgh"},
    # Breaker: HERALD_STEER_ENABLED was passed through but the key was commented out, so steering on stopped
    # `herald serve` ("HERALD_STEER_ENABLED needs HERALD_STEER_API_KEY") and restart: unless-stopped looped
    {"HERALD_STEER_ENABLED": "true", "HERALD_STEER_API_KEY": "steer-key-0123456789"},
])
def test_the_compose_environment_starts_herald(monkeypatch, host):
    environment = herald_environment(host)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert settings.steer_enabled == (host.get("HERALD_STEER_ENABLED") == "true")
    key = settings.steer_api_key.get_secret_value() if settings.steer_api_key else None
    assert key == host.get("HERALD_STEER_API_KEY")
    assert [k.get_secret_value() for k in settings.api_keys] == ([host["HERALD_API_KEYS"]] if "HERALD_API_KEYS" in host else [])


def test_the_stack_s_prometheus_scrapes_herald_s_health_port():
    # its connections are outside HERALD_MAX_CONNECTIONS: on the API's port a flood holding that bound made the
    # scrape fail exactly when the metrics mattered (tester)
    environment = herald_environment({})
    config = yaml.safe_load((COMPOSE.parent / "prometheus" / "prometheus.yml").read_text())
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "herald"]
    (target,) = [target for group in job["static_configs"] for target in group["targets"]]
    assert target == f"herald:{environment['HERALD_HEALTH_PORT']}" and job["metrics_path"] == "/metrics"
    assert Settings(_env_file=None, **{name.removeprefix("HERALD_").lower(): value for name, value in environment.items()
                                       if name in ("HERALD_PORT", "HERALD_HEALTH_PORT")}).health_port == 8001
