"""Every setting from the environment (CRONFLEET_ + the option name), one table, and the
precedence flag > environment > file > default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cronfleet.config import ConfigError, load_config
from cronfleet.config.env import ENV_SETTINGS, env_name, pick
from cronfleet.config.keys import API_KEYS, SCHEDULER_KEYS

ROOT = Path(__file__).resolve().parents[3]


def test_every_key_has_a_variable_and_the_docs_list_each() -> None:
    names = {s.name for s in ENV_SETTINGS}
    assert names == {env_name("scheduler", k) for k in SCHEDULER_KEYS} | {
        env_name("api", k) for k in API_KEYS}
    assert "CRONFLEET_API_PORT" in names and "CRONFLEET_LOG_FORMAT" in names
    docs = (ROOT / "docs" / "configuration.md").read_text()
    missing = [n for n in sorted(names) if f"`{n}`" not in docs]
    assert not missing, f"docs/configuration.md does not list {missing}"


def test_environment_without_a_file() -> None:
    config = load_config(env={"CRONFLEET_API_PORT": "9000", "CRONFLEET_API_HOST": "0.0.0.0",
                              "CRONFLEET_LOG_FORMAT": "json", "CRONFLEET_TIMEZONE": "Europe/Paris",
                              "CRONFLEET_SHUTDOWN_GRACE": "2m", "CRONFLEET_ENTRY_POINTS": "off",
                              "CRONFLEET_METRICS_PORT": "9100", "CRONFLEET_API_ENABLED": "0"})
    assert (config.api_port, config.api_host, config.log_format) == (9000, "0.0.0.0", "json")
    assert (config.timezone, config.shutdown_grace) == ("Europe/Paris", 120.0)
    assert (config.entry_points, config.metrics_port, config.api_enabled) == (False, 9100, False)
    assert config.origins["api_port"] == "CRONFLEET_API_PORT"


def test_precedence_flag_environment_file_default(write: Callable[..., Path]) -> None:
    path = write("cronfleet.toml", """
        [scheduler]
        log_level = "warning"
        [api]
        port = 8181
        host = "10.0.0.1"
        """)
    file_only = load_config(path, env={})
    assert (file_only.api_port, file_only.log_level, file_only.api_host) == (8181, "warning",
                                                                             "10.0.0.1")
    assert file_only.log_format == "text"  # the default
    both = load_config(path, env={"CRONFLEET_API_PORT": "9191"})
    assert (both.api_port, both.api_host) == (9191, "10.0.0.1")  # env beats the file
    assert pick(None, "--port", both, "api_port") == (9191, "CRONFLEET_API_PORT")
    assert pick(7000, "--port", both, "api_port") == (7000, "--port")  # the flag beats both
    assert pick(None, "--host", both, "api_host") == ("10.0.0.1", str(path))
    assert pick(None, "--log-format", both, "log_format") == ("text", "default")


@pytest.mark.parametrize(("env", "message"), [
    ({"CRONFLEET_API_PORT": "eighty"},
     "CRONFLEET_API_PORT='eighty': expected a port number 0-65535, got a string"),
    ({"CRONFLEET_LOG_FORMAT": "xml"},
     """CRONFLEET_LOG_FORMAT='xml': expected one of "text", "json", got"""),
    ({"CRONFLEET_ENTRY_POINTS": "maybe"},
     "CRONFLEET_ENTRY_POINTS='maybe': expected true or false, got"),
    ({"CRONFLEET_TIMEZONE": "Mars/Olympus"}, "CRONFLEET_TIMEZONE='Mars/Olympus': "),
])
def test_a_bad_variable_is_named(write: Callable[..., Path], env: dict[str, str],
                                 message: str) -> None:
    path = write("cronfleet.toml", "[api]\nport = 8181\n")
    for where in (path, None):
        with pytest.raises(ConfigError) as info:
            load_config(where, env=env)
        texts = [str(p) for p in info.value.problems]
        assert len(texts) == 1 and texts[0].startswith(message), texts


def test_plugins_list_from_the_environment() -> None:
    config = load_config(env={"CRONFLEET_PLUGINS": "myapp.jobs:Reports, other.mod:Plugin"})
    assert [p.path for p in config.plugins] == ["myapp.jobs:Reports", "other.mod:Plugin"]


def test_api_lists_and_sizes_from_the_environment() -> None:
    config = load_config(env={"CRONFLEET_API_PRIVATE_TARGETS": "10.1.2.0/24, billing.internal",
                              "CRONFLEET_API_MAX_REQUEST_BODY": "4096"})
    assert config.api_private_targets == ["10.1.2.0/24", "billing.internal"]
    assert config.api_max_request_body == 4096


def test_instance_ttl_from_the_environment() -> None:
    assert load_config(env={"CRONFLEET_INSTANCE_TTL": "30s"}).instance_ttl == 30.0
