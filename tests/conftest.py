"""Fixtures every test may take: the session's shared run folders of real tiny CPU studies.

Every training process the tests start (trials, jobs, the suite's own torch) runs one CPU thread
unless ``OMP_NUM_THREADS`` says otherwise: the tiny models' operators are too small to gain from a
second thread, and on a 2-core host where any other process runs, two OpenMP threads wait on each
other at every operator (a tiny gr00t_n16 step took 0.5 s with two threads against 0.05 s with one).
Set before anything imports torch; ``autotune.train.trial.launch`` keeps a value already set.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.studies import failed_run, failed_run_printed, quick_run, quick_run_printed  # noqa: E402, F401
