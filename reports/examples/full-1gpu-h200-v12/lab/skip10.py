"""Probe: old and new PyAV readers, same process, same random frames of the loader's dataset."""
import glob, random, time, statistics, sys, json, importlib.util
import numpy as np
from pathlib import Path
from autotune.data.video import PyAVReader
spec = importlib.util.spec_from_file_location("video_old", ".lab/video_old.py"); old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
import torch; torch.set_num_threads(1)
files = sorted(glob.glob(str(Path.home() / ".cache/autotune/datasets/lerobot-v2.1-h264-*-s256-seed0/videos/**/*.mp4"), recursive=True))
res = {"old": [], "new": []}; bad = 0
for f in files[:8]:
    a, b = old.PyAVReader(Path(f), 20.0), PyAVReader(Path(f), 20.0)
    idx = list(range(a.num_frames)); random.Random(0).shuffle(idx)
    bad += sum(not np.array_equal(a.frame(i).numpy(), b.frame(i).numpy()) for i in idx)
    for r in range(3):
        for k, rd in (("old", a), ("new", b)):
            t0 = time.perf_counter(); [rd.frame(i) for i in idx]; res[k].append((time.perf_counter() - t0) / len(idx) * 1e3)
out = {k: statistics.median(v) for k, v in res.items()} | {"mismatches": bad, "files": len(files[:8])}
print(out); json.dump(out, open(sys.argv[1], "w"))
