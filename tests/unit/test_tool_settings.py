"""The tool settings: ``TOOL_ALLOWED_HOSTS`` / ``CONVO_TOOL_ALLOWED_HOSTS``, the turn
deadline and the tool timeout, validated at start-up and naming the variable."""

from __future__ import annotations

import pytest

from convo_memory.config import Settings, SettingsError
from local_runtime.banner import BannerInfo, render_banner
from local_runtime.runtime import ConfigError, RuntimeConfig

REQUIRED = {"TABLE_NAME": "t", "RUNS_TABLE_NAME": "r"}


def test_the_defaults() -> None:
    settings = Settings.from_env(REQUIRED)
    assert settings.tool_allowed_hosts == ()
    assert (settings.turn_deadline_seconds, settings.tool_timeout_seconds) == (25, 10)
    assert settings.tool_secret_key_id == ""


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TOOL_ALLOWED_HOSTS", "http://127.0.0.1"),
        ("TOOL_ALLOWED_HOSTS", "host:99999"),
        ("TURN_DEADLINE_SECONDS", "0"),
        ("TOOL_TIMEOUT_SECONDS", "-1"),
    ],
)
def test_a_bad_tool_setting_fails_the_start_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({**REQUIRED, variable: value})


def test_the_local_runtime_reads_and_checks_convo_tool_allowed_hosts() -> None:
    config = RuntimeConfig.from_env({"CONVO_TOOL_ALLOWED_HOSTS": " 127.0.0.1:8765 , tools.lan "})
    assert config.tool_allowed_hosts == ("127.0.0.1:8765", "tools.lan")
    assert RuntimeConfig.from_env({}).tool_allowed_hosts == ()
    with pytest.raises(ConfigError, match="CONVO_TOOL_ALLOWED_HOSTS"):
        RuntimeConfig.from_env({"CONVO_TOOL_ALLOWED_HOSTS": "https://127.0.0.1/"})


def test_the_banner_names_the_allowed_tool_hosts() -> None:
    info = BannerInfo("http://a", "http://b", "http://c", True, "tok", False)
    assert "Tool hosts" not in render_banner(info)
    text = render_banner(
        BannerInfo(
            "http://a", "http://b", "http://c", True, "tok", False, tool_hosts=("127.0.0.1:8765",)
        )
    )
    assert "Tool hosts   127.0.0.1:8765 (CONVO_TOOL_ALLOWED_HOSTS)" in text
