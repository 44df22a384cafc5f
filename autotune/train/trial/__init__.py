"""A trial's processes: one configuration run in fresh processes, and the record it returns.

* :mod:`.launch`: runs a configuration (torchrun for several ranks) and collects its record;
* :mod:`.guard`: a trial's first process; :mod:`.procgroup`: its processes started and stopped together;
* :mod:`.zygote` and :mod:`.zygote_client`: a warm parent that trials fork from;
* :mod:`.worker`: one process of a run; :mod:`.exitcause`: why processes ended without a result;
* :mod:`.hostload`: how busy the host is before a run starts;
* :mod:`.record`: the typed record of one run, read by the search and the report.
"""
