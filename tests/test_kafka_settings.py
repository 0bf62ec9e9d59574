"""librdkafka settings from files, -X and pipelines, and the one redaction function
(issue 11, item 11). Pure code: no broker."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError
from eos_runtime.kafka_settings import merge, parse_assignments, read_properties
from eos_runtime.redact import MASK, Settings, is_secret, redact, remember

PASSWORD = "pw-unit-7f3a9c"


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password", "ssl.keystore.password",
                                 "sasl.oauthbearer.client.secret", "my.Secret.thing",
                                 "some.PASSWORD.x"])
def test_secret_keys(key):
    assert is_secret(key)


@pytest.mark.parametrize("key", ["sasl.username", "security.protocol", "ssl.ca.location"])
def test_plain_keys(key):
    assert not is_secret(key)


def test_redact_masks_secret_settings_and_remembered_values_in_text():
    settings = {"sasl.username": "alice", "sasl.password": PASSWORD}
    assert redact(settings) == {"sasl.username": "alice", "sasl.password": MASK}
    remember(settings)
    assert redact(f"refused {PASSWORD}!") == f"refused {MASK}!"
    assert redact("alice") == "alice"          # only secrets are remembered
    assert redact(3) == 3


def test_settings_never_show_their_secrets_also_after_pickling():
    s = Settings({"sasl.username": "alice", "sasl.password": PASSWORD})
    for shown in (repr(s), str(s), f"{s}", repr([s])):
        assert PASSWORD not in shown and "alice" in shown
    again = pickle.loads(cloudpickle.dumps(s))
    assert again["sasl.password"] == PASSWORD and PASSWORD not in repr(again)


def test_a_properties_file_with_comments_and_both_separators(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("# SASL\n\n! also a comment\nsecurity.protocol = SASL_SSL\n"
                 "sasl.mechanism: PLAIN\nsasl.password=a=b:c\n")
    assert dict(read_properties(f)) == {"security.protocol": "SASL_SSL",
                                        "sasl.mechanism": "PLAIN", "sasl.password": "a=b:c"}


def test_a_bad_properties_line_is_named_without_its_value(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\njust-a-word\n")
    with pytest.raises(ConfigError, match=r"line 2: expected key=value"):
        read_properties(f)
    with pytest.raises(ConfigError, match="does not exist"):
        read_properties(tmp_path / "missing.properties")


def test_x_assignments_later_layers_win_and_owned_keys_are_refused():
    x = parse_assignments(["sasl.username=bob", "linger.ms=7"])
    assert merge({"sasl.username": "alice", "client.rack": "r1"}, x) == {
        "sasl.username": "bob", "client.rack": "r1", "linger.ms": "7"}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_assignments(["sasl.username"])
    with pytest.raises(ConfigError, match=r"acks is set by eos_runtime itself"):
        parse_assignments(["acks=1"])
    with pytest.raises(ConfigError, match="--bootstrap-servers"):
        parse_assignments(["bootstrap.servers=h:1"])


def test_a_pipeline_setting_is_checked_where_it_is_declared():
    p = Pipeline("secured", kafka_config={"security.protocol": "SASL_SSL",
                                          "sasl.password": PASSWORD})
    assert p.kafka_config["security.protocol"] == "SASL_SSL"
    assert PASSWORD not in repr(p.kafka_config)
    with pytest.raises(ConfigError, match="transactional.id is set by eos_runtime itself"):
        Pipeline("secured", kafka_config={"transactional.id": "x"})
    with pytest.raises(ConfigError, match="dict of name to value"):
        Pipeline("secured", kafka_config="security.protocol=SSL")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"must be a string or a number.*\*\*\*") as err:
        Pipeline("secured", kafka_config={"sasl.password": [PASSWORD]})
    assert PASSWORD not in str(err.value)
