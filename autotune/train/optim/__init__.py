"""AdamW in the implementations ``optimizer.impl`` names, with its schedule and clipping.

* :mod:`.adamw`: the optimizer a session steps (``build_optimizer``), the warm-up and cosine schedule;
* :mod:`.clip`: what autotune's own implementations share (clipping inside their step);
* :mod:`.compiled`: ``impl: compiled``, the clipped update compiled by ``torch.compile``;
* :mod:`.master`: ``impl: master``, bf16 weights with fp32 masters updated in one pass
  (:mod:`.master_kernels`: its Triton kernels);
* :mod:`.streams`: ``optimizer.streams: N``, torch's AdamW in shards on concurrent CUDA streams.
"""
