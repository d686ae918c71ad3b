"""IPython startup file (the container puts it in profile_default/startup/): reload edited modules,
and start a kernel launched outside the checkout in the checkout.

With the checkout installed editable, `nbdev_export` (or an edit to tunix_agentic/*.py) reaches a
running kernel before its next cell, without a restart. VS Code's *Existing Jupyter Server* kernels
start in the server's folder (/workspace), not the notebook's, and each notebook's closing
`nbdev_export()` finds settings.ini from the working folder: such a kernel moves to the checkout.
"""
import importlib.util as _iu
import os as _os
from pathlib import Path as _Path

try:
    _ip = get_ipython()  # noqa: F821 (defined inside IPython)
except NameError:
    _ip = None
if _ip is not None:
    _ip.run_line_magic('load_ext', 'autoreload')
    _ip.run_line_magic('autoreload', '2')
    _spec, _cwd = _iu.find_spec('tunix_agentic'), _Path.cwd()
    _root = _Path(_spec.origin).parents[1] if _spec and _spec.origin else None
    _inside = any((p / 'settings.ini').exists() for p in [_cwd, *_cwd.parents])
    if _root and (_root / 'settings.ini').exists() and not _inside: _os.chdir(_root)
del _ip, _iu, _os, _Path
