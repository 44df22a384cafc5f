"""Training: a configuration applied to a workload's model, run and measured.

The core every run shares sits here: :mod:`~autotune.train.session` (the model with every knob
applied and its step function), :mod:`~autotune.train.knobs`, :mod:`~autotune.train.precision`,
:mod:`~autotune.train.graphs`, :mod:`~autotune.train.distributed` and
:mod:`~autotune.train.compile_cache`. What runs it is in four sub-packages, by job:

* :mod:`autotune.train.window`: a measured (or profiled) window of steps in this process, and loss parity;
* :mod:`autotune.train.trial`: a trial's processes (guard, warm zygote, workers) and the record they return;
* :mod:`autotune.train.optim`: AdamW in each implementation the ``optimizer.impl`` knob names;
* :mod:`autotune.train.job`: the long job (``autotune train --max-steps``), its checkpoints and export.

:mod:`~autotune.train.cli` registers ``autotune train``, ``verify`` and ``profile``.
"""
