"""A wheel built from the repository (``pip install .``, not only ``-e``) carries every package and
its data: installed alone into a folder, it imports every lab's package, loads the stored studies,
and runs lab 0 from a copy of its folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

CHECK = """
import importlib, json, pkgutil, lab_utils
mods = [m.name for m in pkgutil.walk_packages(lab_utils.__path__, "lab_utils.")
        if not m.name.endswith(("__main__", "_rank", "_zygote"))]
for m in mods:
    importlib.import_module(m)
from lab_utils.labs.lab03_ddp import reallink
from lab_utils.labs.lab05_local_sgd import diloco
print(json.dumps({"file": lab_utils.__file__, "modules": mods,
                  "real_link_points": len(reallink.load().points), "diloco": type(diloco.load_stored()).__name__}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the tracked files and installed (no dependencies) in a folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    src = tmp / "src"
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", src], check=True)
    (wheel,) = (tmp / "dist").glob("lab_utils-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", tmp / "site", wheel], check=True)
    return tmp / "site"


def env_with(site: Path) -> dict[str, str]:
    """This interpreter's packages (torch...), with the wheel's lab_utils first on the path."""
    return {**os.environ, "PYTHONPATH": str(site), "LAB_SIZE": "smoke", "OMP_NUM_THREADS": "1"}


def test_the_wheel_imports_every_module_and_finds_its_data(installed, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, env=env_with(installed), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(installed)), got["file"]
    expected = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "lab_utils").rglob("*.py")
    } - {"lab_utils"}
    assert {m for m in expected if not m.endswith(("__main__", "_rank", "_zygote"))} == set(got["modules"])
    assert got["real_link_points"] > 0 and got["diloco"]


def test_lab_0_runs_on_the_wheel(installed, tmp_path):
    lab = tmp_path / "00_setup_check"
    shutil.copytree(ROOT / "labs" / "00_setup_check", lab)
    run = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--output", "ran.ipynb",
         "--ExecutePreprocessor.timeout=600", str(lab / "00_setup_check.ipynb")],
        cwd=lab, env=env_with(installed), capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    cells = json.loads((lab / "ran.ipynb").read_text())["cells"]
    errors = [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors and any(c.get("outputs") for c in cells)
