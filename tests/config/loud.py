"""A workload module whose import is seen: it fails, so that a command names it at once.

``tests.config.loud:Workload`` in a configuration shows when the module is imported: before the
file is validated the error would be this module's, not the file's.
"""

raise ImportError("tests.config.loud was imported")
