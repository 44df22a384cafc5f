"""Benchmark commands, each ``python -m autotune.benchmarks.NAME --help``:

* ``gpu_suite``: configurations (built-in names, configuration files, knobs on top) trained in one
  run against stock, with loss parity, MFU and the fastest row's profile;
* ``classify``: the trace classifier's time and peak memory against HTA's;
* ``loader``: the data path's samples/s per dataset format and worker count;
* ``long_job``: what checkpoints cost a long job and how close a resume stays to an uninterrupted run;
* ``compile_cache``: what a study's compile cache saves a run that compiles what an earlier one did.
"""
