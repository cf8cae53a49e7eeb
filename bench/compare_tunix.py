#!/usr/bin/env python3
"""Compare our GRPO trainer with google-tunix 0.1.7 on benchmark workload W1.

Run with the project's venv python from the repository root:

    .venv/bin/python bench/compare_tunix.py [--steps N] [--skip-install]

What it does, in one run:
  1. creates (or reuses) the Tunix virtual environment bench/.tunix-venv from
     the pinned bench/requirements-tunix.txt. A hash stamp inside the venv
     records what was installed; the venv is rebuilt only when the
     requirements file (or the base interpreter) changes. pip's output is
     shown as it installs.
  2. runs bench/tunix_w1.py inside that venv (Tunix's own Qwen3 model,
     RLCluster with the vanilla rollout engine and GRPOLearner) and reads its
     final JSON line.
  3. runs our side: `<project python> bench/grpo_step.py --config
     configs/w1.yaml --steps N --json` and reads its final JSON line
     (it must contain "seconds_per_step").
  4. prints both seconds-per-step figures, ratio=ours/tunix,
     speedup=tunix/ours and the target line (ours <= 0.5 x tunix).

The two sides run one after the other, never at the same time. The machine
load average is printed before each side because the figures are wall-clock
times on a shared 2-core machine.

Exit status: 0 when both sides were measured (whether or not the target is
met, unless --require-target), 1 when the target is missed under
--require-target, 2 when our side failed, 3 when the Tunix side failed.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import threading
import time

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
VENV = BENCH / ".tunix-venv"
REQUIREMENTS = BENCH / "requirements-tunix.txt"
TUNIX_SCRIPT = BENCH / "tunix_w1.py"
OUR_SCRIPT = BENCH / "grpo_step.py"
STAMP_NAME = ".requirements-stamp.json"
TARGET_RATIO = 0.5
# Interpreter versions the pinned set is known to install and run on.
SUPPORTED_PY = ((3, 11), (3, 12))


def say(msg: str = "") -> None:
  print(msg, flush=True)


def loadavg() -> str:
  try:
    return "%.2f %.2f %.2f" % os.getloadavg()
  except OSError:
    return "n/a"


# --------------------------------------------------------------------------
# Tunix venv
# --------------------------------------------------------------------------


def _probe_python(exe: str) -> tuple[int, int] | None:
  """Returns (major, minor) if `exe` runs and can create a venv, else None."""
  try:
    out = subprocess.run(
        [exe, "-c",
         "import sys, venv, ensurepip; print('%d %d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=60,
    )
  except (OSError, subprocess.TimeoutExpired):
    return None
  if out.returncode != 0:
    return None
  try:
    major, minor = (int(x) for x in out.stdout.split())
  except ValueError:
    return None
  return major, minor


def find_base_python(explicit: str | None) -> str:
  """Finds an interpreter to build the Tunix venv with.

  Order: --python / $TUNIX_PYTHON; the interpreter behind the running one
  (the project venv's base, Python 3.11); python3.11 and python3.12 on PATH;
  pyenv's installs ($PYENV_ROOT or ~/.pyenv, then /root/.pyenv).
  """
  candidates: list[str] = []
  if explicit:
    candidates.append(explicit)
  env_py = os.environ.get("TUNIX_PYTHON")
  if env_py:
    candidates.append(env_py)
  base = getattr(sys, "_base_executable", None)
  if base:
    candidates.append(base)
  for name in ("python3.11", "python3.12"):
    found = shutil.which(name)
    if found:
      candidates.append(found)
  roots = []
  for root in (os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv"),
               "/root/.pyenv"):
    if root and root not in roots:
      roots.append(root)
  for root in roots:
    for minor in (11, 12):
      candidates += sorted(
          glob.glob(f"{root}/versions/3.{minor}.*/bin/python3.{minor}"),
          reverse=True,
      )
  candidates.append("/root/.pyenv/versions/3.12.1/bin/python3.12")

  tried = []
  seen = set()
  for exe in candidates:
    if exe in seen:
      continue
    seen.add(exe)
    ver = _probe_python(exe)
    tried.append(f"{exe} -> {ver}")
    if ver is None:
      continue
    if explicit and exe == explicit:
      return exe  # the user asked for this one
    if ver in SUPPORTED_PY:
      return exe
  raise SystemExit(
      "compare_tunix: no usable Python 3.11/3.12 interpreter found for the "
      "Tunix venv. Tried:\n  " + "\n  ".join(tried)
      + "\nPass one with --python or $TUNIX_PYTHON."
  )


def venv_python() -> Path:
  return VENV / "bin" / "python"


def wanted_stamp(base_python: str) -> dict:
  req = REQUIREMENTS.read_bytes()
  ver = subprocess.run(
      [base_python, "-c", "import sys; print(sys.version.split()[0])"],
      capture_output=True, text=True, check=True,
  ).stdout.strip()
  return {
      "requirements_sha256": hashlib.sha256(req).hexdigest(),
      "python_version": ver,
  }


def read_stamp() -> dict | None:
  try:
    return json.loads((VENV / STAMP_NAME).read_text())
  except (OSError, ValueError):
    return None


def ensure_venv(args) -> Path:
  """Creates or reuses bench/.tunix-venv; returns its python."""
  py = venv_python()
  if args.skip_install:
    if not py.exists():
      raise SystemExit(
          f"compare_tunix: --skip-install given but {py} does not exist; "
          "run once without --skip-install."
      )
    say(f"[tunix venv] --skip-install: using {VENV} as it is")
    return py
  if not REQUIREMENTS.exists():
    raise SystemExit(f"compare_tunix: missing {REQUIREMENTS}")

  base = find_base_python(args.python)
  want = wanted_stamp(base)
  have = read_stamp()
  if py.exists() and have is not None and all(
      have.get(k) == v for k, v in want.items()
  ):
    say(f"[tunix venv] up to date ({VENV}, python {want['python_version']}, "
        f"requirements sha256 {want['requirements_sha256'][:12]})")
    return py

  why = "not present" if not VENV.exists() else (
      "requirements or interpreter changed" if have else "no install stamp")
  say(f"[tunix venv] (re)building {VENV}: {why}")
  say(f"[tunix venv] base interpreter: {base} "
      f"(Python {want['python_version']})")
  if VENV.exists():
    shutil.rmtree(VENV)
  t0 = time.time()
  subprocess.run([base, "-m", "venv", str(VENV)], check=True)
  env = _clean_env()
  env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
  say(f"[tunix venv] pip install -r {REQUIREMENTS.relative_to(REPO)} "
      "(first install downloads a few hundred MB; pip output follows)")
  rc = subprocess.run(
      [str(py), "-m", "pip", "install", "--progress-bar", "off",
       "-r", str(REQUIREMENTS)],
      env=env,
  ).returncode
  if rc != 0:
    raise SystemExit(
        f"compare_tunix: pip install into {VENV} failed (exit {rc}); "
        "the venv is left without a stamp and will be rebuilt next run."
    )
  check = subprocess.run(
      [str(py), "-c",
       "import tunix, jax, flax; "
       "print('tunix', tunix.__version__, 'jax', jax.__version__, "
       "'flax', flax.__version__)"],
      env=env, capture_output=True, text=True,
  )
  if check.returncode != 0:
    say(check.stdout + check.stderr)
    raise SystemExit("compare_tunix: tunix does not import in the new venv")
  say(f"[tunix venv] ready in {time.time() - t0:.0f}s: {check.stdout.strip()}")
  (VENV / STAMP_NAME).write_text(json.dumps(want, indent=1) + "\n")
  return py


# --------------------------------------------------------------------------
# Running the two sides
# --------------------------------------------------------------------------


def _clean_env() -> dict:
  env = dict(os.environ)
  for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__"):
    env.pop(k, None)
  env.setdefault("JAX_PLATFORMS", "cpu")
  env["PYTHONUNBUFFERED"] = "1"
  return env


def run_and_parse(label: str, cmd: list[str], timeout: float) -> tuple[
    dict | None, str]:
  """Runs cmd (stderr passes through, stdout echoed) and returns the last
  JSON object found on its stdout, plus an error message if none."""
  say(f"[{label}] $ {' '.join(cmd)}")
  say(f"[{label}] load average before start: {loadavg()}")
  t0 = time.time()
  try:
    proc = subprocess.Popen(
        cmd, cwd=str(REPO), env=_clean_env(), stdout=subprocess.PIPE,
        text=True, bufsize=1,
    )
  except OSError as e:
    return None, f"could not start: {e}"
  lines = []
  timed_out = threading.Event()

  def _kill():
    timed_out.set()
    proc.kill()

  watchdog = threading.Timer(timeout, _kill)
  watchdog.daemon = True
  watchdog.start()
  try:
    assert proc.stdout is not None
    for line in proc.stdout:
      lines.append(line)
      sys.stdout.write(f"[{label}] {line}")
      sys.stdout.flush()
    rc = proc.wait()
  finally:
    watchdog.cancel()
  wall = time.time() - t0
  result = None
  for line in reversed(lines):
    line = line.strip()
    if line.startswith("{") and line.endswith("}"):
      try:
        obj = json.loads(line)
      except ValueError:
        continue
      if isinstance(obj, dict) and "seconds_per_step" in obj:
        result = obj
        break
  say(f"[{label}] exited {rc} after {wall:.1f}s")
  if result is None:
    if timed_out.is_set():
      return None, f"timed out after {timeout:.0f}s"
    return None, (f"exit status {rc} and no JSON line with "
                  "\"seconds_per_step\" on stdout")
  if rc != 0:
    say(f"[{label}] warning: non-zero exit {rc} but a result was printed")
  return result, ""


def _cpu_note(res: dict) -> str:
  cpu = res.get("cpu_seconds_per_step")
  return f"; process CPU {cpu:.3f} s/step" if isinstance(cpu, (int, float)) \
      else ""


def our_python() -> str:
  venv_py = REPO / ".venv" / "bin" / "python"
  return str(venv_py) if venv_py.exists() else sys.executable


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
      description=(
          "Run benchmark workload W1 (GRPO, Qwen3-style 4x256 model, 8 "
          "prompts x G=4, 32+64 tokens, CPU float32) on google-tunix 0.1.7 "
          "and on our trainer, and print seconds per step and the ratio. "
          "Target: ours <= 0.5 x tunix."
      ),
  )
  p.add_argument("--steps", type=int, default=6,
                 help="GRPO steps per side; the first 2 are warm-up and the "
                      "median of the rest is reported (default 6)")
  p.add_argument("--skip-install", action="store_true",
                 help="use bench/.tunix-venv as it is (no stamp check, no "
                      "pip)")
  p.add_argument("--config", default="configs/w1.yaml",
                 help="our trainer's config for W1 (default configs/w1.yaml)")
  p.add_argument("--python", default=None,
                 help="base interpreter for the Tunix venv (default: found "
                      "automatically, Python 3.11 preferred, then 3.12)")
  p.add_argument("--tunix-only", action="store_true",
                 help="measure the Tunix side only")
  p.add_argument("--timeout", type=float, default=1800,
                 help="seconds allowed for each side (default 1800)")
  p.add_argument("--require-target", action="store_true",
                 help="exit 1 when ours > 0.5 x tunix")
  p.add_argument("--json", action="store_true",
                 help="also print a final JSON line with both results")
  args = p.parse_args(argv)
  if args.steps < 3:
    p.error("--steps must be at least 3 (2 warm-up steps + 1 timed)")

  # ---- Tunix side ----
  say("=" * 72)
  say("Tunix side (google-tunix 0.1.7, bench/.tunix-venv)")
  say("=" * 72)
  py = ensure_venv(args)
  tunix_res, tunix_err = run_and_parse(
      "tunix", [str(py), str(TUNIX_SCRIPT), "--steps", str(args.steps)],
      args.timeout,
  )

  # ---- our side ----
  ours_res, ours_err = None, ""
  if not args.tunix_only:
    say("=" * 72)
    say("Our side (bench/grpo_step.py)")
    say("=" * 72)
    if not OUR_SCRIPT.exists():
      ours_err = (f"{OUR_SCRIPT.relative_to(REPO)} does not exist yet, so our "
                  "side cannot be measured")
      say(f"[ours] ERROR: {ours_err}")
    else:
      ours_res, ours_err = run_and_parse(
          "ours",
          [our_python(), str(OUR_SCRIPT), "--config", args.config,
           "--steps", str(args.steps), "--json"],
          args.timeout,
      )

  # ---- summary ----
  say("")
  say("=" * 72)
  say("W1 GRPO step time (1 CPU device, float32; lower is better)")
  say("=" * 72)
  t = tunix_res["seconds_per_step"] if tunix_res else None
  o = ours_res["seconds_per_step"] if ours_res else None
  if tunix_res:
    say(f"tunix {tunix_res.get('version', '?')}: {t:.4f} s/step "
        f"(median of {tunix_res.get('steps_timed', '?')} steps after warm-up; "
        f"generated {tunix_res.get('gen_tokens_per_seq_min')}"
        f"-{tunix_res.get('gen_tokens_per_seq_max')} tokens/seq"
        f"{_cpu_note(tunix_res)})")
  else:
    say(f"tunix: FAILED: {tunix_err}")
  if ours_res:
    say(f"ours : {o:.4f} s/step "
        f"(steps timed: {ours_res.get('steps_timed', '?')}"
        f"{_cpu_note(ours_res)})")
  elif not args.tunix_only:
    say(f"ours : FAILED: {ours_err}")
  summary = {"tunix": tunix_res, "ours": ours_res}
  status = 0
  if t and o:
    ratio = o / t
    speedup = t / o
    met = ratio <= TARGET_RATIO
    say(f"ratio=ours/tunix={ratio:.3f}")
    say(f"speedup=tunix/ours={speedup:.2f}x")
    say(f"target: ours <= {TARGET_RATIO} x tunix "
        f"(<= {TARGET_RATIO * t:.4f} s/step): {'MET' if met else 'NOT MET'}")
    summary.update(ratio=ratio, speedup=speedup, target_met=met)
    if args.require_target and not met:
      status = 1
  elif t and not args.tunix_only:
    say(f"target: ours <= {TARGET_RATIO} x tunix "
        f"(<= {TARGET_RATIO * t:.4f} s/step): not measured")
  say(f"load average now: {loadavg()} (figures are wall clock on a shared "
      f"{os.cpu_count()}-core machine)")
  if args.json:
    print(json.dumps(summary), flush=True)
  if not tunix_res:
    return 3
  if not args.tunix_only and not ours_res:
    return 2
  return status


if __name__ == "__main__":
  sys.exit(main())
