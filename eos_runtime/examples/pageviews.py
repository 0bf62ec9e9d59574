"""Page views -> per-user visits -> per-page totals: three stages, state in two of them.

Input: topic ``pageviews``, JSON objects ``{"user": "u7", "page": "/p3"}``.
Stage 1 parses and shuffles by user. Stage 2 keeps, per user, the pages the user has
seen and marks each view as a first visit of that page or not; it shuffles by page.
Stage 3 keeps, per page, the running number of views and of distinct visitors. Output:
topic ``page-totals``, key = the page, value = "<views>:<visitors>".

Every stage-2 and stage-3 task has several producers upstream (shared channels).
Under exactly-once, a page viewed n times gets exactly the values with views 1..n, and
the last one's visitor count is the number of distinct users who viewed it.
"""

from eos_runtime import Pipeline

pipeline = Pipeline("pageviews", processing_guarantee="exactly-once", commit_interval=1.0,
                    parallelism=2)


def first_visit(view, state):
    pages = state.get("pages", [])
    new = view["page"] not in pages
    if new:
        state.set("pages", pages + [view["page"]])
    return {"page": view["page"], "new_visitor": new}


def page_total(visit, state):
    views = state.get("views", 0) + 1
    visitors = state.get("visitors", 0) + (1 if visit["new_visitor"] else 0)
    state.set("views", views)
    state.set("visitors", visitors)
    return f"{views}:{visitors}"


(pipeline.source("pageviews", value="json")
    .key_by(lambda view: view["user"])
    .map(first_visit, stateful=True)
    .key_by(lambda visit: visit["page"])
    .map(page_total, stateful=True)
    .sink("page-totals", key="utf8", value="utf8"))
