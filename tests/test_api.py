"""The pipeline API's own checks."""

import pytest

from eos_runtime import Pipeline
from eos_runtime.errors import ConfigError


def test_rename_changes_job_name_and_edge_topics_only():
    p = Pipeline("a")
    p.source("in").key_by(str).map(str).sink("out")
    p.rename("b", source="in2")
    assert (p.name, p.source_topic, p.sink_topic) == ("b", "in2", "out")
    p.rename("c", sink="out2")
    assert (p.name, p.source_topic, p.sink_topic) == ("c", "in2", "out2")
    with pytest.raises(ConfigError, match="pipeline name"):
        p.rename("bad name")
    # a letter outside ASCII names no topic a log can hold (its control topic was refused
    # only once the run started)
    with pytest.raises(ConfigError, match="pipeline name 'zählung': use letters"):
        Pipeline("zählung")
    unfinished = Pipeline("u")
    unfinished.source("in")
    with pytest.raises(ConfigError, match="needs a source and a sink"):
        unfinished.rename("v")
