"""The environment as declared: pins that matter, environment.yml in step with pyproject.toml."""

from __future__ import annotations

import pathlib
import re

import tomllib
import yaml

import lab_utils

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def deps() -> dict[str, str]:
    out = {}
    for line in PYPROJECT["project"]["dependencies"]:
        name = re.split(r"[<>=!~ \[;]", line, maxsplit=1)[0].lower()
        out[name] = line
    return out


def test_torch_and_hf_stack_are_pinned():
    d = deps()
    assert d["torch"].replace(" ", "") == "torch==2.13.*"  # a looser range pulls a CUDA build
    assert "==" in d["transformers"] and "==" in d["accelerate"]


def test_environment_yml_installs_this_project_through_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    from packaging.specifiers import SpecifierSet

    py = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python=")]
    assert len(py) == 1 and py[0].split("=")[1] in SpecifierSet(PYPROJECT["project"]["requires-python"])
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    # Installing the project itself (editable, with every extra) is what keeps the two in step:
    # no dependency is listed twice, so none can drift.
    assert len(pip_section) == 1 and re.fullmatch(r'-e "?\.\[(.+)\]"?', pip_section[0])
    assert set(re.search(r"\[(.+)\]", pip_section[0]).group(1).split(",")) == extras
    assert "pip" in env["dependencies"]


def test_off_pins_reads_pyproject_and_finds_the_stack_as_pinned():
    from lab_utils import env

    assert env.pins()["torch"] == "==2.13.*" and set(env.pins()) == set(deps())
    assert env.off_pins() == {}


def test_off_pins_names_a_moved_pin_and_a_missing_package(monkeypatch):
    from lab_utils import env

    have = lab_utils.versions()["accelerate"]  # 1.15.x
    pins = {"accelerate": "==1.14.*", "torch": "==2.13.*", "surely-not-installed": ">=1", "numpy": "<3,>=1.26"}
    monkeypatch.setattr(env, "pins", lambda: pins)
    assert env.off_pins() == {
        "accelerate": f"installed {have}, pinned ==1.14.*",
        "surely-not-installed": "missing, pinned >=1",
    }
    monkeypatch.setattr(env, "pins", lambda: {"accelerate": "==2.15.*", "numpy": "==3.0.*"})
    assert set(env.off_pins()) == {"accelerate", "numpy"}  # the major alone, or a minor alone, is not enough


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*make test\b", ci, re.M)
