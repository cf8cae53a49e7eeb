"""The code sandbox: how fast each attack ends against its limit, and a step's reward time against
its generation time.

    .venv/bin/python bench/sandbox.py [--skip-step] [--steps 2]

1. Attacks (trainers.sandbox): each program runs one test under limits of 1 s wall clock and 1 CPU
   second; the figure is the seconds until its outcome is back, against its budget (the limit, plus
   the sandbox's start allowance `runner.START_S`) + 1 s. Target: every attack within it.
2. A step's rewards: SmolLM2-135M-Instruct trains `--steps` steps of the python_functions task, 8
   prompts x G 8 = 64 completions x 10 tests each (configs/python-functions.yaml); the last step's
   64 completions (train.samples_per_step=64) are scored again with code_tests, timed, and compared
   with that step's generation seconds (timing/generation_prefill_s + timing/generation_decode_s).
   Target: reward seconds < 2 x generation seconds (on CPU). Needs var/models/smollm2-135m-instruct
   (`python -m trainers fetch-model smollm2-135m-instruct`). The last line is `... ratio=X.XX`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from trainers.data.code_problems import TESTS_PER_PROBLEM  # noqa: E402
from trainers.sandbox.runner import START_S, Limits, run_program  # noqa: E402

LIMITS = Limits(test_timeout_s=1.0, cpu_s=1, memory_bytes=256 << 20, max_processes=16)
ATTACKS = {
    "infinite loop": "while True:\n    pass\n",
    "sleep forever": "import time\ntime.sleep(3600)\n",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "10 GB allocation": "x = bytearray(10 * 1024 ** 3)\n",
    "allocate until killed": "xs = []\nwhile True:\n    xs.append(bytearray(1 << 20))\n",
    "write outside its folder": "open('/usr/escaped-by-the-sandbox', 'w').write('x')\n",
    "unmount its root": "import ctypes\nassert ctypes.CDLL(None).umount2(b'/usr', 2) == 0, 'refused'\n",
    "a Unix socket": "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/postgresql/.s.PGSQL.5432')\n",
    "fill a tmpfs": "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n",
    "open a socket": "import socket\nsocket.create_connection(('127.0.0.1', 5432), timeout=5)\n",
    "kill its parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "exit early with success": "import os\nos._exit(0)\n",
    "fill the disk": "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n",
}


def attacks() -> bool:
    budget = LIMITS.test_timeout_s + START_S + 1.0
    print(f"attack (limits: {LIMITS.test_timeout_s:g} s wall, {LIMITS.cpu_s} CPU s per test; target <= {budget:g} s)")
    ok = True
    for name, code in ATTACKS.items():
        started = time.monotonic()
        outcome = run_program(code, ["pass"], LIMITS)
        seconds = time.monotonic() - started
        result = outcome.results[0] if outcome.results else None
        within = seconds <= budget
        ok &= within
        why = ("test passed (the attack did nothing)" if result.passed else result.reason) if result else outcome.error
        print(f"  {name:26s} {seconds:6.2f} s  {'ok' if within else 'OVER'}  {why}")
    return ok


def step_rewards(steps: int) -> tuple[float, float]:
    from trainers.data.rewards import score
    from trainers.data.tasks import make_train_eval  # noqa: F401 - the task registry

    out = tempfile.mkdtemp(prefix="bench-sandbox-")
    cmd = [
        sys.executable,
        "-m",
        "trainers",
        "run",
        os.path.join(ROOT, "configs", "python-functions.yaml"),
        "--out",
        out,
        "--set",
        f"train.max_steps={steps}",
        "--set",
        "train.samples_per_step=64",
        "--set",
        "eval.every_steps=0",
        "--set",
        "eval.before_training=false",
        "--set",
        "checkpoint.every_steps=0",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    last = rows[-1]
    generation_s = last["timing/generation_prefill_s"] + last["timing/generation_decode_s"]
    samples = [json.loads(line) for line in open(os.path.join(out, "samples.jsonl"))]
    samples = [s for s in samples if s["step"] == last["step"] and s.get("kind", "train") == "train"]
    examples = {e["prompt"]: e for e in _examples()}
    chosen = [examples[s["prompt"]] for s in samples]
    started = time.monotonic()
    total, _ = score([s["completion"] for s in samples], chosen, [("code_tests", 1.0)])
    reward_s = time.monotonic() - started
    print(
        f"step {last['step']}: {len(samples)} completions x {TESTS_PER_PROBLEM} tests scored in {reward_s:.2f} s; "
        f"generation {generation_s:.2f} s; reward/mean {float(total.mean()):.3f}, accuracy {last['accuracy']:.3f}"
    )
    return reward_s, generation_s


def _examples() -> list[dict]:
    import yaml

    from trainers.data.tasks import make_train_eval

    config = yaml.safe_load(open(os.path.join(ROOT, "configs", "python-functions.yaml")))
    d = config["data"]
    train, evaluation = make_train_eval(d["task"], config.get("seed", 0), d["train_prompts"], d["eval_prompts"])
    return train + evaluation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-step", action="store_true", help="only the attacks")
    parser.add_argument("--steps", type=int, default=2, help="training steps; the last one is measured")
    args = parser.parse_args()
    ok = attacks()
    print(f"attacks: {'all within their limits' if ok else 'SOME OVER THEIR LIMITS'}")
    if not args.skip_step:
        reward_s, generation_s = step_rewards(args.steps)
        print(
            f"reward_s={reward_s:.2f} generation_s={generation_s:.2f} ratio={reward_s / generation_s:.2f} (target < 2)"
        )


if __name__ == "__main__":
    main()
