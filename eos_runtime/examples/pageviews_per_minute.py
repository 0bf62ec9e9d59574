"""Views per page per minute: each minute's count once, when the minute is over.

Input: topic ``views``, JSON objects ``{"page": "/p3", "ts": 1764000000000}``, ``ts``
the view's time in ms (event time). Output: topic ``views-per-minute``, key = the page,
value = ``{"start": ms, "end": ms, "value": views}``, one per page and minute, emitted
when the job's watermark passes the minute's end plus 10 s of grace (views up to 10 s
out of order still count). A view later than that is late: counted in the run summary
and, with ``--dead-letters``, set aside with its reason.

Under exactly-once each (page, minute) is in the committed output once, however the
tasks crash, restart or are rewound (docs/api.md, "Windows and event time").
"""

from eos_runtime import Pipeline
from eos_runtime.windows import tumbling

pipeline = Pipeline("views-per-minute", parallelism=2)
(pipeline.source("views", value="json", timestamp=lambda view: view["ts"])
    .key_by(lambda view: view["page"])
    .window(tumbling(minutes=1), grace=10_000)
    .count()
    .final()
    .sink("views-per-minute", key="utf8", value="json"))
