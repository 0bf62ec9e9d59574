"""EOS_PROFILE_DIR: each task attempt runs under cProfile and leaves its profile there, for
a profile of a task where it really runs (under Spark, a steady rate, a bench's system)."""

from __future__ import annotations

import pstats

from scripted import END, Data, Marker, Restore, ScriptedJob


def test_a_task_run_with_a_profile_dir_leaves_its_profile_there(tmp_path, monkeypatch):
    job = ScriptedJob(tmp_path, {"data_dir": str(tmp_path / "data")})
    try:
        job.write(Restore(0, 1, 0), Restore(1, 1, 0), Data(0, 1, 1, "a"), Data(1, 1, 2, "b"),
                  Marker(0, 1, 1), Marker(1, 1, END), Marker(0, 1, END))
        assert job.run_task() is not None       # no profile asked: none written
        assert not (tmp_path / "prof").exists()
        monkeypatch.setenv("EOS_PROFILE_DIR", str(tmp_path / "prof"))
        assert job.run_task() is not None
    finally:
        job.close()
    [prof] = (tmp_path / "prof").iterdir()
    assert prof.name.startswith(f"task{job.task_id}-attempt1-") and prof.suffix == ".prof"
    names = {func for _, _, func in pstats.Stats(str(prof)).stats}   # type: ignore[attr-defined]
    assert "_ride_through" in names   # the whole task, not a part of it
