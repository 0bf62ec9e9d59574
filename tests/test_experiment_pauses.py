"""A pause holds a task at its point with SIGSTOP, which the task sends itself just after
noting the fault; the experiment acts on the note, then lets the task go on with SIGCONT.
Found by a random run (`eos experiment wordcount --kinds ...,append,... --seed 6019`,
issue 22's runs, on a busy machine): the SIGCONT came before the task's own SIGSTOP, and
the task stayed stopped for good; the run timed out after 600 s."""

from __future__ import annotations

import subprocess
import sys
import threading

from eos_runtime.experiments.injector import resume

CHILD = ("import os, signal, sys\n"
         "sys.stdin.readline()\n"                      # noted; not yet stopped
         "os.kill(os.getpid(), signal.SIGSTOP)\n"
         "print('went on', flush=True)\n")


def test_a_task_let_go_before_it_stopped_itself_still_goes_on():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        letting_go = threading.Thread(target=resume, args=(child.pid,))
        letting_go.start()
        letting_go.join(1.0)          # the experiment acted at once, the task is slow
        child.stdin.write("\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=60)
        letting_go.join(60)
        assert out == "went on\n" and not letting_go.is_alive()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_letting_go_of_a_task_that_died_returns():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    resume(child.pid)
