"""A dead letter keeps the failing record's exact bytes beside its readable form."""

from __future__ import annotations

import base64
import json

from eos_runtime import Pipeline
from eos_runtime.runner import run_pipeline
from eos_runtime.runtime.committed import read_output
from eos_runtime.transport import TopicSpec, open_transport


def test_a_value_that_is_not_utf8_is_recoverable_from_its_dead_letter(tmp_path):
    opts = {"data_dir": str(tmp_path / "data")}
    bad = b"\xff\xfe caf\xe9"
    with open_transport(**opts) as t:
        t.create_topics([TopicSpec("raw", 1)])
        with t.producer() as p:
            p.produce("raw", 0, b"fine", key=b"k\xff")
            p.produce("raw", 0, bad, key=b"k2")
            p.flush()
    p = Pipeline("dl-bytes", dead_letters=True)
    p.source("raw", key="utf8", value="utf8").map(str.upper).sink("up", value="utf8")
    run_pipeline(p, state_dir=str(tmp_path / "state"), **opts)
    with open_transport(**opts) as t:
        letters = [json.loads(r.value) for r in read_output(t, "dl-bytes.dead-letters",
                                                             job="dl-bytes")]
    by_value = {base64.b64decode(d["value_base64"]): d for d in letters}
    assert set(by_value) == {b"fine", bad}          # the bad key, and the bad value
    assert by_value[bad]["value"] == "\\xff\\xfe caf\\xe9"
    assert base64.b64decode(by_value[b"fine"]["key_base64"]) == b"k\xff"
    assert by_value[bad]["key_base64"] == base64.b64encode(b"k2").decode()
