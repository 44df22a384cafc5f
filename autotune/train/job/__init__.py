"""The long job: ``autotune train --config best.yaml --max-steps N --output-dir D``.

* :mod:`.cli`: its options and command; :mod:`.launch`: several ranks through torchrun
  (:mod:`.worker`: one rank); :mod:`.training`: the job (``Job``) and :mod:`.loop` its step loop;
* :mod:`.control`: decisions every rank takes at the same step (stop, profile);
* :mod:`.checkpoint` and :mod:`.state`: checkpoints written whole or not at all, and what they hold;
* :mod:`.watch`: the progress bar, metrics files and throughput watch;
* :mod:`.export`: a checkpoint as an upstream checkpoint (``autotune export``).
"""
