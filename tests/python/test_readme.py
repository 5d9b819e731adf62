"""The documented Python example runs as written: extracted from docs/python.md (the README
links to it) and started with `lowcomm launch --nproc 2`, as its first line says."""
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LOWCOMM_BUILD", os.path.join(ROOT, "build"))


def test_readme_python_example_runs_as_written():
    page = open(os.path.join(ROOT, "docs", "python.md")).read()
    block = re.search(r"<!-- README example:[^>]*-->\n```python\n(.*?)```", page, re.S).group(1)
    assert len(block.splitlines()) <= 22, "docs/python.md promises a short example"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "example.py")
        with open(path, "w") as f:
            f.write(block)
        env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
        out = subprocess.run([os.path.join(BUILD, "lowcomm"), "launch", "--nproc", "2", "--", "/usr/bin/python3", path],
                             env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"loss ([0-9.]+), compression ([0-9.]+)x, sent (\d+) bytes", out.stdout)
    assert m, out.stdout
    assert float(m.group(1)) < 0.4 and float(m.group(2)) > 3 and int(m.group(3)) > 0, out.stdout
