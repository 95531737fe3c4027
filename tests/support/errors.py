"""Assertions on configuration errors: they must name the field."""

from __future__ import annotations

import pytest

from otel_tooleval import ConfigError, load_config


def assert_config_error(config: object, where: str, words: str) -> ConfigError:
    """``load_config`` rejects ``config`` with a problem at ``where`` whose message has ``words``."""
    with pytest.raises(ConfigError) as info:
        load_config(config)  # type: ignore[arg-type]
    message = str(info.value)
    assert f"{where}: " in message, message
    assert words in message, message
    return info.value
