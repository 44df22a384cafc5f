"""Picture types of one video, and how many frames a decoder with skip_frame NONREF gives out.
Usage: python frame_types.py VIDEO.mp4"""
import collections, sys

import av

with av.open(sys.argv[1]) as c:
    print("picture types:", collections.Counter(str(f.pict_type) for f in c.decode(c.streams.video[0])))
with av.open(sys.argv[1]) as c:
    stream = c.streams.video[0]
    stream.codec_context.skip_frame = "NONREF"
    print("decoded with NONREF:", sum(1 for _ in c.decode(stream)))
