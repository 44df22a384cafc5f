"""A measured window of training steps in this process, and what is measured in it.

* :mod:`.setup`: a warmed-up session and its device batches, where every window starts;
* :mod:`.runner`: N measured steps of a configuration (one rank of a run);
* :mod:`.measure`: step timing with the device synchronised, peak memory, the matmul rate for MFU;
* :mod:`.profile`: a profiled window (``autotune profile``); :mod:`.capture_path`: the warm-up
  steps a CUDA-graph capture runs;
* :mod:`.cost`: where a run's wall time goes; :mod:`.verify`: loss parity against stock.
"""
