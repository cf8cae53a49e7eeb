"""The persistent compilation cache: a run's compiled programs are written to its folder."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import sys
import jax, jax.numpy as jnp
from trainers.loop.compile_cache import enable_compilation_cache
print(enable_compilation_cache(sys.argv[1], min_compile_time_s=0))
print(float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((8, 8))).sum()))
"""


def _run(env_extra: dict, folder: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "TRAINERS_COMPILATION_CACHE")}
    env.update(PYTHONPATH=ROOT, **env_extra)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, folder], env=env, capture_output=True, text=True, timeout=120, check=True
    )


def test_compiled_programs_are_written_to_the_folder(tmp_path):
    folder = tmp_path / "jax-cache"
    out = _run({}, str(folder))
    assert out.stdout.splitlines()[0] == str(folder)
    assert any(folder.iterdir()), "no compiled program was written"


def test_jax_variable_wins_and_off_switch(tmp_path):
    own = tmp_path / "own"
    out = _run({"JAX_COMPILATION_CACHE_DIR": str(own)}, str(tmp_path / "given"))
    assert out.stdout.splitlines()[0] == str(own) and any(own.iterdir())
    assert not (tmp_path / "given").exists()
    off = _run({"TRAINERS_COMPILATION_CACHE": "0"}, str(tmp_path / "off"))
    assert off.stdout.splitlines()[0] == "None" and not (tmp_path / "off").exists()
