"""Clicks enriched from a users table, branched to two sinks.

Inputs: topic ``users``, keyed by user id (UTF-8), values JSON objects such as
``{"name": "Ann", "country": "NO"}`` (a null value deletes the user); topic ``clicks``,
JSON objects such as ``{"id": 7, "user": "u3", "page": "/home"}``.

Outputs: ``enriched-clicks``, every click once with its user's country (null for a user
the table does not hold, yet or at all); ``clicks-per-user``, keyed by user id, each
user's running click count. Under exactly-once, a user with n clicks has exactly the
counts 1..n, and each click is in ``enriched-clicks`` once, whatever crashed.

    eos produce users ...  # keyed records: see docs/api.md, Tables and lookups
    eos run examples/clickstream.py
    eos consume enriched-clicks --job clickstream
"""

from eos_runtime import Pipeline

pipeline = Pipeline("clickstream", processing_guarantee="exactly-once", commit_interval=1.0,
                    parallelism=2)

users = pipeline.table("users", key="utf8", value="json")


def with_country(click, user):
    return {**click, "country": None if user is None else user["country"]}


def count(click, state):
    n = state.get("clicks", 0) + 1
    state.set("clicks", n)
    return str(n)


enriched = (pipeline.source("clicks", value="json")
            .lookup(users, on=lambda click: click["user"], how="left", join=with_country))
enriched.sink("enriched-clicks", value="json")                        # branch 1
(enriched.key_by(lambda click: click["user"])                         # branch 2
    .map(count, stateful=True)
    .sink("clicks-per-user", key="utf8", value="utf8"))
