"""pip install ./clients/python works (pyproject.toml): into a fresh venv,
after which outbox_writer imports from that venv, outside the source tree
and without PYTHONPATH, with boto3 its declared dependency and the
outbox-writer command installed.

The project is copied as it is (tests and all, build outputs left out) so
that concurrent runs do not share setuptools' build directories. The venv
sees the test venv's packages through a .pth file, so pip resolves boto3 as
installed, and builds with the test venv's pinned setuptools
(requirements-test.txt) without build isolation: the test downloads
nothing, and the build backend's version is the pinned one, not whatever
PyPI serves that day. outbox_writer is not among the test venv's packages
(the tests import it from the source tree), so the import proves the
install."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv

from conftest import HERE

PROJECT = os.path.dirname(HERE)


def run(*cmd, cwd, env):
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_pip_install_into_a_fresh_venv_then_import(tmp_path):
    shutil.copytree(PROJECT, tmp_path / "python", ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = str(env_dir / "bin" / "python")
    site = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path, env={}).strip()
    with open(os.path.join(site, "test-venv.pth"), "w", encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    run(sys.executable, "-m", "pip", "--python", py, "install", "--disable-pip-version-check", "--no-input", "--no-build-isolation",
        "--no-index", "./python",
        cwd=tmp_path, env=env)
    out = run(py, "-c", "import importlib.metadata as md, outbox_writer\n"
              "print(outbox_writer.__file__)\n"
              "print(md.requires('outbox-writer'))\n"
              "outbox_writer.new_client(region_name='us-east-1')\n"
              "print(outbox_writer.Writer.__name__, outbox_writer.CONTRACT_VERSION)", cwd=tmp_path, env=env).splitlines()
    assert out[0].startswith(site + os.sep), f"outbox_writer imported from {out[0]}, not the venv {site}"
    assert out[1] == "['boto3']"
    assert out[2] == "Writer 1"
    assert "--messages-table" in run(str(env_dir / "bin" / "outbox-writer"), "--help", cwd=tmp_path, env=env)
