"""What a job keeps on its logs, below the task runtime: the control topic (runs, lease,
stop requests; ``control.py``), the layout its run records keep (``layout.py``), a live
run's lease renewal and stop watch (``live_run.py``), the change log (``changelog.py``),
the committed reading of a sink's output (``committed.py``), checkpoint stores
(``checkpoints.py``), Startpoints in the metadata topic (``startpoints.py``) and the
checkpoint listeners that read them (``listeners.py``)."""
