"""IPython startup file (the container puts it in profile_default/startup/): reload edited modules.

With the checkout installed editable, `nbdev_export` (or an edit to tunix_agentic/*.py) reaches a
running kernel before its next cell, without a restart.
"""
try:
    _ip = get_ipython()  # noqa: F821 (defined inside IPython)
except NameError:
    _ip = None
if _ip is not None:
    _ip.run_line_magic('load_ext', 'autoreload')
    _ip.run_line_magic('autoreload', '2')
del _ip
