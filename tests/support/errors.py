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


def assert_schema_agrees(document: object, good: list[dict], bad: list[dict]) -> None:
    """An entry schema, the whole-config schema and ``load_config`` accept ``good`` entries and
    reject ``bad`` ones alike."""
    import jsonschema

    from otel_tooleval.schema import config_schema

    whole = jsonschema.Draft202012Validator(config_schema())
    for body in good:
        jsonschema.validate(body, document)
        assert not list(whole.iter_errors({"graders": [body]}))
        load_config({"graders": [body]})
    for body in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(body, document)
        assert list(whole.iter_errors({"graders": [body]}))
        with pytest.raises(ConfigError):
            load_config({"graders": [body]})
