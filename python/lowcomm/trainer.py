"""``lowcomm.train``: a plain ``torch.nn.Module`` trained by ``lowcomm train``, with any strategy
(AB-training included), then handed back with the trained weights.

The module is exported with ``torch.jit.script`` (or ``torch.jit.trace`` when ``example_input``
is given; a trace keeps the dropout / batch-norm behaviour of the mode it was taken in, so
script a module that has them), saved as ``OUT_DIR/model.pt`` and trained as
``model.name = "torchscript"``; the run's
``model_state.pt`` is loaded back into the module with ``load_state_dict``. The training itself
is lowcomm's C++ trainer in its own processes (``--nproc``), so nothing of the method is
reimplemented in Python.
"""
import json
import os
import shutil
import subprocess

import torch

from . import _build


def _toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"lowcomm.train: cannot write {type(value).__name__} {value!r} as a TOML value")


def executable(exe=None):
    """The lowcomm program: ``exe``, else ``$LOWCOMM_EXE``, else the build tree's, else ``lowcomm`` on PATH."""
    for candidate in (exe, os.environ.get("LOWCOMM_EXE"), _build.LOWCOMM_EXE, shutil.which("lowcomm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("lowcomm.train: no lowcomm executable (pass exe= or set LOWCOMM_EXE)")


def train(module, config, out_dir, *, nproc=1, overrides=None, example_input=None, exe=None, args=(), timeout=None):
    """Trains ``module`` with ``lowcomm train --config CONFIG --nproc NPROC`` and the ``overrides``
    (``{"strategy.name": "ab", "ab.group_size": 1}``: each a ``--set key=value``, the value written
    as TOML), writing the run to ``out_dir``. Loads the trained weights into ``module`` (in place)
    and returns the run's summary.json as a dict. ``args``: more command-line arguments (e.g.
    ``["--timeline", "t.json"]``). A failed run raises RuntimeError with lowcomm's error output;
    nothing is loaded then."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.pt")
    scripted = torch.jit.trace(module, example_input) if example_input is not None else torch.jit.script(module)
    scripted.save(path)
    sets = {"model.name": "torchscript", "model.path": path, "logging.out_dir": out_dir, "logging.progress": False}
    sets.update(overrides or {})
    cmd = [executable(exe), "train", "--config", str(config), "--nproc", str(nproc)]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={_toml(value)}"]
    run = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"lowcomm train failed (exit {run.returncode}): {run.stderr.strip()[-4000:]}")
    module.load_state_dict(torch.load(os.path.join(out_dir, "model_state.pt")))
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)
